/* GCC 11+'s libstdc++ headers read glibc 2.32's __libc_single_threaded (in
 * the inline reference counting of std::shared_ptr, for one) when the build
 * host's glibc has it, which would make the library need GLIBC_2.32. A data
 * symbol cannot take a version pin's trampoline, so the library that links
 * this defines its own, hidden: always 0 ("there may be other threads"), so
 * those counts are always atomic, which is what glibc's value says in any
 * process running TensorFlow. See docs/design.md, "Production". */
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
