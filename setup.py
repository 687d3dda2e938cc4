"""Only the optional C kernel lives here (metadata: setup.cfg).

``raetsalt._trains`` (raetsalt/_trains.c) is built when a C compiler and Python's headers
are there; ``optional=True`` turns a failed build into a warning, and raetsalt then runs
on the same code in Python (``raetsalt.engine.native.trains.PyKernel``).  ``raetsalt._udpio``
(raetsalt/_udpio.c, the UDP driver's recvmmsg) likewise: without it the driver reads one
datagram per system call (``raetsalt.drivers.batching``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "raetsalt._trains",
            ["raetsalt/_trains.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "raetsalt._udpio",
            ["raetsalt/_udpio.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
