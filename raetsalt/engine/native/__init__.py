"""The native profile: the fast message path used when both ends are raetsalt.

Negotiation (inside the authenticated allow handshake, so it cannot be downgraded):
our responder starts its cookie ``oreo`` with ``OREO_MARK``; the oreo travels inside the
cookie box, which only the holder of the responder's long-term key can make.  Our
initiator, seeing the mark, puts ``FQDN_MARK`` in the initiate's fqdn field, inside the
initiate box, which only the holder of the initiator's short-term key can make.  A raet
0.6.8 peer never sends either mark, so it always gets the exact raet format; tampering
with either mark breaks a box and the handshake fails (closed), it does not fall back.
The marks name the frame format's version: ends of different versions use raet's.

A native datagram is a short prefix (magic, the receiver's uid, a packet counter) and a
box of frames under the session key; the box authenticates everything, so there is no
per-packet signature, and a counter is accepted once (sliding window), so replays are
dropped.  Messages travel on streams with their own sequence numbers: small ones on the
express stream, large ones on the bulk stream, so a small message never waits behind
bulk bytes; each stream is delivered in order.  Many frames share one datagram.  The
receiver acknowledges packet counters in ranges; the sender declares losses and probes
as QUIC does (RFC 9002), under a congestion controller and a pacer.

One module per concern:

* ``frames``: every wire layout (datagram prefix, nonce, frames, negotiation marks);
* ``channel``: the session with one remote, what the road drives (``Channel``);
* ``receive``: the receiving side (frames of a packet, ack ranges, reassembly);
* ``recovery``: sent-packet records, acknowledgements, loss detection, probe time-out;
* ``scheduler``: what to send next (streams, framing, confirmation, expiry);
* ``flow`` and ``congestion``: how much may be in flight and when (window, pacer);
* ``trains``: the per-datagram kernel (seal, open, bulk bursts, GRO trains), in Python
  and compiled (``raetsalt/_trains.c``);
* ``rekey``: key rotation inside the session; ``migration``: path validation;
* ``alive``: presence over a native session (cheap probes, the silence a main asks for).

Imports run one way: ``channel`` -> ``receive``, ``recovery``, ``scheduler``, ``flow``,
``rekey``, ``migration``, ``alive`` -> ``congestion``, ``trains`` -> ``frames``.
Nothing here imports ``engine/road.py``; the road is seen through ``engine/port.py``.
"""
