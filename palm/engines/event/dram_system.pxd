# C types for the compiled build of dram_system.py (an "augmenting" .pxd; see fair.pxd, setup.py
# and palm/engines/event/accel.py). It changes no arithmetic: every value stays an IEEE double,
# a C integer of the same value or a Python object, so the build's results equal
# dram_system.py's bit for bit (tests/palm/test_compiled.py). An access's and the system's
# fields become C struct fields, and the rate loops run on C doubles.
cimport cython

cdef class _Access:
    cdef public double remaining, limit, noc_bandwidth, latency, rate
    cdef public Py_ssize_t pattern, single
    cdef public tuple limits
    cdef public object done

cdef class DramSystem:
    cdef public object env, classes, _timer, _on_timer
    cdef public list bandwidth, _limits, _active, _users, _class_busy
    cdef public double _last

    @cython.locals(dt=double, a=_Access)
    cpdef _advance(self, double now)

    @cython.locals(k=Py_ssize_t)
    cpdef _count_busy(self, double dt)

    @cython.locals(now=double, dt=double, access=_Access, k=Py_ssize_t)
    cpdef begin(
        self, double nbytes_per_core, Py_ssize_t pattern, double noc_bandwidth_Bps,
        double latency_s,
    )

    @cython.locals(
        users=list, soonest=double, a=_Access, rate=double,
        share=double, left=double, k=Py_ssize_t, limit=double, delay=double,
    )
    cpdef _schedule(self, double dt=*)

    @cython.locals(
        active=list, now=double, dt=double, busy=list, k=Py_ssize_t, a=_Access, x=_Access,
        best=double, left=double, users=list,
    )
    cpdef _complete(self, object timer)
