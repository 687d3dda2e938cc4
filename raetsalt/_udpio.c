/* raetsalt._udpio: the UDP driver's receive system call in C (raetsalt/drivers/batching.py).
 *
 * recv_many() reads every datagram waiting on a non-blocking UDP socket, up to ``count``,
 * in one recvmmsg(2) call, with the UDP GRO segment size of each when the socket has
 * UDP_GRO on.  Python's socket module has no recvmmsg, and filling its headers through
 * ctypes costs more than a system call saves; here they are built on the stack.
 *
 * Only moving bytes: what a datagram means is the road's business.  Linux only (the
 * module is built elsewhere too, without the function; batching.py then reads one
 * datagram per call).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifdef __linux__
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define MAX_BATCH 64
#define CONTROL 64 /* room for the UDP_GRO control message (an int) */

/* The last source seen and its (host, port) tuple: a session's datagrams all come from
 * one address, so the tuple is made once, not once per datagram. */
static struct sockaddr_storage last_name;
static socklen_t last_len = 0;
static PyObject *last_address = NULL;

static PyObject *address_of(const struct sockaddr_storage *name, socklen_t len) {
    if (last_address != NULL && len == last_len && memcmp(name, &last_name, len) == 0) {
        Py_INCREF(last_address);
        return last_address;
    }
    /* As Python's socket module spells it (getnameinfo, numeric): a scoped IPv6 host
     * keeps its "%zone". */
    char host[NI_MAXHOST];
    int port = 0;
    if (name->ss_family == AF_INET) port = ntohs(((const struct sockaddr_in *)name)->sin_port);
    else if (name->ss_family == AF_INET6)
        port = ntohs(((const struct sockaddr_in6 *)name)->sin6_port);
    if (getnameinfo((const struct sockaddr *)name, len, host, sizeof host, NULL, 0,
                    NI_NUMERICHOST) != 0)
        host[0] = 0;
    PyObject *address = Py_BuildValue("(si)", host, port);
    if (address == NULL) return NULL;
    if (len <= sizeof last_name) {
        Py_XSETREF(last_address, address);
        Py_INCREF(address);
        memcpy(&last_name, name, len);
        last_len = len;
    }
    return address;
}

/* recv_many(fd, buf, slot, count) -> list | int
 * At most ``count`` (1 to 64) datagrams into ``buf`` (at least count * slot bytes), the
 * n-th at n * slot, in one non-blocking recvmmsg.  Returns [(start, size, segment,
 * (host, port)), ...] in arrival order (segment: the GRO segment size, or size when the
 * datagram came alone; an empty list: nothing was waiting), or the errno of a failed
 * call (an ICMP error queued on the socket is reported this way once). */
static PyObject *recv_many(PyObject *self, PyObject *args) {
    int fd, count;
    Py_ssize_t slot;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "iw*ni:recv_many", &fd, &buf, &slot, &count)) return NULL;
    PyObject *result = NULL;
    if (count < 1 || count > MAX_BATCH || slot < 1 || slot > 0x7fffffff ||
        buf.len / slot < count) {
        PyErr_SetString(PyExc_ValueError, "recv_many: arguments out of range");
        goto done;
    }
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iovs[MAX_BATCH];
    struct sockaddr_storage names[MAX_BATCH];
    union { char bytes[CONTROL]; struct cmsghdr align; } controls[MAX_BATCH];
    memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)count);
    for (int n = 0; n < count; n++) {
        iovs[n].iov_base = (char *)buf.buf + (Py_ssize_t)n * slot;
        iovs[n].iov_len = (size_t)slot;
        msgs[n].msg_hdr.msg_name = &names[n];
        msgs[n].msg_hdr.msg_namelen = sizeof names[n];
        msgs[n].msg_hdr.msg_iov = &iovs[n];
        msgs[n].msg_hdr.msg_iovlen = 1;
        msgs[n].msg_hdr.msg_control = controls[n].bytes;
        msgs[n].msg_hdr.msg_controllen = CONTROL;
    }
    int got, code = 0;
    Py_BEGIN_ALLOW_THREADS
    got = recvmmsg(fd, msgs, (unsigned int)count, MSG_DONTWAIT, NULL);
    if (got < 0) code = errno;
    Py_END_ALLOW_THREADS
    if (got < 0) {
        result = (code == EAGAIN || code == EWOULDBLOCK) ? PyList_New(0) : PyLong_FromLong(code);
        goto done;
    }
    result = PyList_New(got);
    if (result == NULL) goto done;
    for (int n = 0; n < got; n++) {
        Py_ssize_t size = (Py_ssize_t)msgs[n].msg_len, segment = size;
        struct msghdr *header = &msgs[n].msg_hdr;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(header); c != NULL; c = CMSG_NXTHDR(header, c)) {
            if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
                c->cmsg_len >= CMSG_LEN(sizeof(int))) {
                int value;
                memcpy(&value, CMSG_DATA(c), sizeof value);
                if (value > 0 && value < segment) segment = value;
            }
        }
        PyObject *address = address_of(&names[n], header->msg_namelen);
        PyObject *entry =
            address == NULL ? NULL
                            : Py_BuildValue("(nnnN)", (Py_ssize_t)n * slot, size, segment, address);
        if (entry == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, n, entry);
    }
done:
    PyBuffer_Release(&buf);
    return result;
}
#endif

static PyMethodDef methods[] = {
#ifdef __linux__
    {"recv_many", recv_many, METH_VARARGS,
     "recv_many(fd, buf, slot, count) -> [(start, size, segment, address)] | errno"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "raetsalt._udpio",
    "The UDP driver's receive system call in C (see raetsalt.drivers.batching).", -1, methods,
};

PyMODINIT_FUNC PyInit__udpio(void) { return PyModule_Create(&module); }
