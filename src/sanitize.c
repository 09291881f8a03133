/* sanitize.c - the sanitizer runtime's defaults for the builds with DRIFT_SANITIZE=ON or
 * DRIFT_TSAN=ON (every executable of such a build compiles this file in; see CMakeLists.txt). The
 * runtime asks for these at start-up (each runtime for its own); ASAN_OPTIONS, UBSAN_OPTIONS,
 * LSAN_OPTIONS and TSAN_OPTIONS in the environment still override them. */

/* intercept_tls_get_addr=0: GCC 12's runtime (Debian 12) takes a dynamic TLS block of glibc 2.25
 * and later for an old glibc's and its leak check then crashes at exit ("Tracer caught signal
 * 11"; google/sanitizers#1322). fast_unwind_on_malloc=0: Open MPI allocates from plugins (MCA
 * components) that it unloads in MPI_Finalize and that have no frame pointers; the full unwind
 * reaches libmpi and friends, which the suppressions below name. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "intercept_tls_get_addr=0:fast_unwind_on_malloc=0:detect_leaks=1:strict_string_checks=1";
}

const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1:halt_on_error=1"; }

/* Leaks that LeakSanitizer must not report: memory that Open MPI and the libraries under it keep
 * until the process ends (its plugins, its progress thread's libevent, hwloc's topology, PMIx),
 * and HDF5's free lists. A frame of one of these libraries anywhere in the allocation's stack
 * suppresses the report; drift's own allocations never have one, so they are all checked. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libmpi.so\n"
         "leak:libopen-pal.so\n"
         "leak:libopen-rte.so\n"
         "leak:libevent_core\n"
         "leak:libevent_pthreads\n"
         "leak:libhwloc.so\n"
         "leak:libpmix.so\n"
         "leak:libhdf5_openmpi.so\n";
}

/* Quiet at exit: the list of suppressions used would be a second line on stderr, where the tests
 * expect drift's one. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "print_suppressions=0"; }

/* ThreadSanitizer: every report fails its program (exit status 66 at its end), the races inside
 * libraries that are not instrumented (Open MPI, HDF5, libpng) are theirs to find. The order that
 * MPI guarantees and TSan cannot see inside Open MPI (a reduction of drift's own run on the
 * writer's thread for the main thread's collective) is told to it where it matters (sanitize.h),
 * not suppressed. Open MPI's own locks, taken in orders it alone answers for, are left out of the
 * lock-order check. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "ignore_noninstrumented_modules=1:history_size=4"; }

const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
  return "deadlock:libmpi.so\n"
         "deadlock:libopen-pal.so\n";
}
