# C types for the compiled build of the fair network: filling.py, flowclass.py, clock.py and
# fair.py compiled as one unit (palm/engines/event/builds.py, PARTS), for which this is an
# "augmenting" .pxd (Cython reads it beside the unit; see setup.py and accel.py). It changes
# no arithmetic:
# every value stays an IEEE double or a Python object, so the build's results equal fair.py's
# bit for bit (tests/palm/test_compiled.py). What it buys is in the kinds of access:
#   * the network's, a class's, a route's and the filler's fields become C struct fields
#     (cdef classes), read without a dictionary or descriptor lookup;
#   * the hot paths (a flow's start and end, a class's update, progressive filling, the
#     clock's loop) keep their times, rates and levels as C doubles and their resource indices
#     as C integers.
# Every field stays public: the engine, tests and benchmarks read them as fair.py's.
# Flows are the engine's Arrival events (SimPy events, Python objects): their fields are not
# typed here.
cimport cython

cdef class Route:
    cdef public tuple resources, loads, pairs, tracked
    cdef public double alone_Bps
    cdef public object order

cdef class _Filler:
    cdef public list capacity, room, weight, unfrozen, on, loaded

    @cython.locals(
        inf=double, level=double, current=double, a=double, cap=double, left=Py_ssize_t,
        stale=Py_ssize_t, i=Py_ssize_t, r=Py_ssize_t, q=Py_ssize_t, rates=list, room=list,
        weight=list, unfrozen=list, on=list, capacity=list, loaded=list, heap=list,
    )
    cpdef list fill(self, routes, dict taken=*, double class_level=*)

cdef class _Class:
    cdef public Py_ssize_t bottleneck, updates
    cdef public double level, service, service_t, bound
    cdef public dict weight, members, rest
    cdef public list heap
    cdef public set touched, seen

    cpdef double served(self, double now)
    cpdef join(self, object f, double now)
    cpdef admit(self, object f, double now, list capacity)
    cpdef move_to(self, double now, double level)
    cpdef see(self, Route route)

    @cython.locals(
        weight=dict, bottleneck=Py_ssize_t, bound=double, w=double, a=double, q=Py_ssize_t
    )
    cpdef double add_load(self, Route route, list capacity)

cdef class FairNetwork:
    cdef public object env, _capacity_array, _started, _first, ready, ready_eid, _filler
    cdef public list capacity, busy_s, nbytes, _since, _users, _on
    cdef public dict _used, _active, _filled
    cdef public bint _count_bytes
    cdef public double next_end
    cdef public Py_ssize_t _refills, _class_misses, class_updates
    cdef public _Class _cls

    @cython.locals(
        now=double, rate=double, end=double, left=double, room=bint, a=double, r=Py_ssize_t,
        c=_Class, capacity=list, on=list, used=dict,
    )
    cpdef begin(self, Route route, double nbytes, double latency_s, object done)

    @cython.locals(a=double, r=Py_ssize_t, users=list, since=list, carried=list)
    cpdef _count_start(self, Route route, double nbytes, double now)

    @cython.locals(level=double, rate=double, end=double, member=bint, capacity=list)
    cpdef _begin_in_class(self, _Class c, object flow, Route route, double now)

    @cython.locals(
        now=double, level=double, finish=double, end=double, a=double, q=Py_ssize_t,
        r=Py_ssize_t, bottleneck=Py_ssize_t, c=_Class, route=Route, users=list, rest=dict,
        weight=dict, capacity=list,
    )
    cpdef _fire_in_class(self)

    @cython.locals(
        now=double, rate=double, a=double, alone=bint, r=Py_ssize_t, route=Route,
        users=list, on=list, used=dict, capacity=list, active=dict,
    )
    cpdef _fire(self)

    @cython.locals(
        c=_Class, route=Route, weight=dict, capacity=list, joins=bint, member=bint,
        level=double, bound=double, w=double, a=double, q=Py_ssize_t, bottleneck=Py_ssize_t,
        rate=double, share=double, finish=double, end=double, e=double, rest=dict, rates=list,
    )
    cpdef bint _class_change(self, object flow, double now, bint started)

    cpdef _through(self, object f, double now)


@cython.locals(finish=double, end=double, e=double, c=_Class)
cpdef _class_next(FairNetwork net)


@cython.locals(rate=double, share=double, a=double, q=Py_ssize_t)
cpdef double _share(Route route, list capacity, dict taken, double level)


@cython.locals(
    end=double, now=double, last=double, ends=Py_ssize_t, idle=Py_ssize_t, limit=Py_ssize_t,
    queue=list,
)
cpdef _run_with_network(object env, FairNetwork net)
