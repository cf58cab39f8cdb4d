"""Symbol versions the library imports instead of the newest ones.

Each entry maps an imported symbol to "target@VERSION": every reference to the
symbol in the link is redirected to `target` at that older version.
version_pins.bzl turns the table into trampolines and linker flags;
tests/packaging/test_portability.py reads it too, so keep this file a plain dict literal.

Why: the host glibc (2.36 here) and libstdc++ (GCC 12) bind plain references to
their newest versions, which TensorFlow's own libtensorflow_framework.so.2
(glibc 2.27, GLIBCXX 3.4.22 in TensorFlow 2.21; older in older ones) does not need.
See docs/design.md, "Production". Our own few glibc calls that glibc 2.34
versioned anew (dlopen, dlsym, dladdr, dlclose) are bound to their old versions
in the source instead, with .symver (load_guard.cc, cuda_runtime_stub.cc).
"""

SYMBOL_PINS = {
    # std::condition_variable::wait(unique_lock<mutex>&), called by inline code
    # of the TensorFlow and Eigen headers the kernels include. GCC 12 added GLIBCXX_3.4.30 (a version that lets
    # thread cancellation unwind); GLIBCXX_3.4.11 is the same wait, noexcept.
    "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE": "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE@GLIBCXX_3.4.11",
    # std::__throw_bad_array_new_length() (GLIBCXX_3.4.29, GCC 11) and
    # __cxa_throw_bad_array_new_length (CXXABI_1.3.8, GCC 4.9), called when the
    # size of a `new T[n]` overflows. TensorFlow 2.15's library needs no more
    # than CXXABI_1.3.7 (GCC 4.8): std::__throw_bad_alloc() throws the base
    # class, std::bad_alloc, which is what callers catch.
    "_ZSt28__throw_bad_array_new_lengthv": "_ZSt17__throw_bad_allocv@GLIBCXX_3.4",
    "__cxa_throw_bad_array_new_length": "_ZSt17__throw_bad_allocv@GLIBCXX_3.4",
    # operator delete(void*, size_t) (CXXABI_1.3.9, GCC 5: C++14 sized
    # deallocation) frees exactly as operator delete(void*), which ignores the size.
    "_ZdlPvm": "_ZdlPv@GLIBCXX_3.4",
    # pow (GLIBC_2.29: glibc's faster pow, versioned anew without SVID error
    # handling), called by the lazy moving average's m^k. pow@GLIBC_2.2.5 is the
    # same function behind the old error-handling wrapper, which only acts on a
    # domain error or overflow (m in [0, 1], k >= 0 have none).
    "pow": "pow@GLIBC_2.2.5",
}
