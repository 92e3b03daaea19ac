# C types for the compiled build of resource_table.py (an "augmenting" .pxd; see fair.pxd,
# setup.py and palm/engines/event/accel.py). It changes no arithmetic: every value stays an
# IEEE double, a C integer of the same value or a Python object, so the build's results equal
# resource_table.py's bit for bit (tests/palm/test_compiled.py). The table's lists become C
# struct fields, and a hold's loops run on C doubles.
cimport cython

cdef class Fabric:
    cdef public list keys, kinds, free_at, busy_s, nbytes, capacity_Bps, _labels
    cdef public dict _index

    @cython.locals(busy=list, carried=list, r=Py_ssize_t, load=double)
    cpdef account(self, object flow, double duration, double nbytes)

    @cython.locals(carried=list, r=Py_ssize_t, load=double)
    cpdef book(self, object flow, double nbytes)

    @cython.locals(
        free=list, busy=list, carried=list, resources=tuple, start=double, end=double,
        r=Py_ssize_t, load=double,
    )
    cpdef double reserve(self, object flow, double now, double duration, double nbytes)
