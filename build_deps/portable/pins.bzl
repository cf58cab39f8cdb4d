"""Symbol versions the library imports instead of the newest ones.

Each entry maps an imported symbol to "target@VERSION": every reference to the
symbol in the link (our objects and the static CUDA runtime alike) is
redirected to `target` at that older version. version_pins.bzl turns the table
into trampolines and linker flags; tests/test_portability.py reads it too, so
keep this file a plain dict literal.

Why: the host glibc (2.36 here) and libstdc++ (GCC 12) bind plain references to
their newest versions, which TensorFlow's own libtensorflow_framework.so.2
(glibc 2.27, GLIBCXX 3.4.22 in TensorFlow 2.21; older in older ones) does not need. See docs/design.md, "Production".
"""

SYMBOL_PINS = {
    # glibc 2.34 moved libpthread, libdl and librt into libc and gave these
    # functions a new GLIBC_2.34 version; the old version is the same code (the
    # same address in libc.so.6), except pthread_kill@GLIBC_2.2.5, which keeps
    # returning ESRCH for an exited thread. The static CUDA runtime references
    # them; these are the versions NVIDIA's own libcudart.so binds the same
    # objects to (objdump -T libcudart.so.13). Before glibc 2.34 they live in
    # libpthread.so.0, libdl.so.2 and librt.so.1, which the library also
    # links (build_deps/portable/BUILD).
    "dlclose": "dlclose@GLIBC_2.2.5",
    "dlerror": "dlerror@GLIBC_2.2.5",
    "dlmopen": "dlmopen@GLIBC_2.3.4",
    "dlopen": "dlopen@GLIBC_2.2.5",
    "dlsym": "dlsym@GLIBC_2.2.5",
    "dlvsym": "dlvsym@GLIBC_2.2.5",
    "pthread_condattr_setpshared": "pthread_condattr_setpshared@GLIBC_2.2.5",
    "pthread_create": "pthread_create@GLIBC_2.2.5",
    "pthread_detach": "pthread_detach@GLIBC_2.2.5",
    "pthread_getspecific": "pthread_getspecific@GLIBC_2.2.5",
    "pthread_join": "pthread_join@GLIBC_2.2.5",
    "pthread_key_create": "pthread_key_create@GLIBC_2.2.5",
    "pthread_key_delete": "pthread_key_delete@GLIBC_2.2.5",
    "pthread_kill": "pthread_kill@GLIBC_2.2.5",
    "pthread_mutex_trylock": "pthread_mutex_trylock@GLIBC_2.2.5",
    "pthread_mutexattr_destroy": "pthread_mutexattr_destroy@GLIBC_2.2.5",
    "pthread_mutexattr_init": "pthread_mutexattr_init@GLIBC_2.2.5",
    "pthread_mutexattr_setpshared": "pthread_mutexattr_setpshared@GLIBC_2.2.5",
    "pthread_mutexattr_settype": "pthread_mutexattr_settype@GLIBC_2.2.5",
    "pthread_once": "pthread_once@GLIBC_2.2.5",
    "pthread_rwlock_destroy": "pthread_rwlock_destroy@GLIBC_2.2.5",
    "pthread_rwlock_init": "pthread_rwlock_init@GLIBC_2.2.5",
    "pthread_rwlock_rdlock": "pthread_rwlock_rdlock@GLIBC_2.2.5",
    "pthread_rwlock_timedrdlock": "pthread_rwlock_timedrdlock@GLIBC_2.2.5",
    "pthread_rwlock_timedwrlock": "pthread_rwlock_timedwrlock@GLIBC_2.2.5",
    "pthread_rwlock_tryrdlock": "pthread_rwlock_tryrdlock@GLIBC_2.2.5",
    "pthread_rwlock_trywrlock": "pthread_rwlock_trywrlock@GLIBC_2.2.5",
    "pthread_rwlock_unlock": "pthread_rwlock_unlock@GLIBC_2.2.5",
    "pthread_rwlock_wrlock": "pthread_rwlock_wrlock@GLIBC_2.2.5",
    "pthread_rwlockattr_destroy": "pthread_rwlockattr_destroy@GLIBC_2.2.5",
    "pthread_rwlockattr_init": "pthread_rwlockattr_init@GLIBC_2.2.5",
    "pthread_rwlockattr_setpshared": "pthread_rwlockattr_setpshared@GLIBC_2.2.5",
    "pthread_setspecific": "pthread_setspecific@GLIBC_2.2.5",
    "pthread_spin_destroy": "pthread_spin_destroy@GLIBC_2.2.5",
    "pthread_spin_init": "pthread_spin_init@GLIBC_2.2.5",
    "pthread_spin_lock": "pthread_spin_lock@GLIBC_2.2.5",
    "pthread_spin_trylock": "pthread_spin_trylock@GLIBC_2.2.5",
    "pthread_spin_unlock": "pthread_spin_unlock@GLIBC_2.2.5",
    "sem_destroy": "sem_destroy@GLIBC_2.2.5",
    "sem_init": "sem_init@GLIBC_2.2.5",
    "sem_post": "sem_post@GLIBC_2.2.5",
    "sem_timedwait": "sem_timedwait@GLIBC_2.2.5",
    "sem_trywait": "sem_trywait@GLIBC_2.2.5",
    "sem_wait": "sem_wait@GLIBC_2.2.5",
    "shm_open": "shm_open@GLIBC_2.2.5",
    "shm_unlink": "shm_unlink@GLIBC_2.2.5",
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
}
