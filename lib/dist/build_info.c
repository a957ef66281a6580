/* What this build of libclmoe is (clmoe_build_info, include/clmoe/clmoe.h): the source
 * commit, configure's arguments, the compiler, and the versions of the OpenCL headers and
 * of the OpenCL loader, MPI, CLBlast and hwloc it was built with and, where a library can
 * be asked, runs with. Two sites compare these lines to tell whether they run the same
 * build. The facts of the build come from configure (config.h) and make (the commit,
 * lib/build_commit.c); the run-time versions are asked once, on the first call. */
#include "clmoe/clmoe.h"
#include "runtime/internal.h"

#include <CL/cl.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#ifdef HAVE_MPI
#include <mpi.h>
#endif

/* `git describe --always --dirty` of the sources, or the release tarball's record of it,
 * or "unknown": written by make into lib/build_commit.c (rewritten only when it changes,
 * so a new commit recompiles that one file). */
extern const char clmoe__build_commit[];

static char info[8192];
static pthread_once_t info_once = PTHREAD_ONCE_INIT;

/* Appends to info; a line cut at the buffer's end stays cut (the text is only read). */
CLMOE_PRINTF(1, 2) static void add(const char *fmt, ...)
{
  const size_t used = strlen(info);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(info + used, sizeof info - used, fmt, ap);
  va_end(ap);
}

static const char *compiler_name(void)
{
#if defined(__clang__)
  return "clang";
#elif defined(__INTEL_LLVM_COMPILER)
  return "icx";
#elif defined(__GNUC__)
  return "gcc";
#else
  return "cc";
#endif
}

/* The OpenCL ICD loader's name and version where it tells them (ocl-icd's
 * clGetICDLoaderInfoOCLICD, which the Khronos loader also offers). */
typedef cl_int (*icd_loader_info_fn)(cl_uint param, size_t size, void *value, size_t *size_ret);
enum { ICDL_OCL_VERSION = 1, ICDL_VERSION = 2, ICDL_NAME = 3 }; /* CL_ICDL_* of cl_ext.h */

static void add_opencl_loader(void)
{
  icd_loader_info_fn f = (icd_loader_info_fn)clGetExtensionFunctionAddress("clGetICDLoaderInfoOCLICD");
  char name[128] = "", version[64] = "", ocl[64] = "";
  if (!f || f(ICDL_NAME, sizeof name, name, NULL) != CL_SUCCESS ||
      f(ICDL_VERSION, sizeof version, version, NULL) != CL_SUCCESS) {
    add("opencl-loader: unknown (the loader does not report its version)\n");
    return;
  }
  name[sizeof name - 1] = version[sizeof version - 1] = '\0';
  if (f(ICDL_OCL_VERSION, sizeof ocl, ocl, NULL) != CL_SUCCESS) ocl[0] = '\0';
  ocl[sizeof ocl - 1] = '\0';
  add("opencl-loader: %s %s%s%s%s\n", name, version, ocl[0] ? " (" : "", ocl, ocl[0] ? ")" : "");
}

#ifdef HAVE_MPI
/* The first line of s, at most n bytes of it, without trailing blanks (MPICH's library
 * version runs over several lines). */
static void first_line(char *dst, size_t n, const char *s)
{
  size_t len = strcspn(s, "\r\n");
  if (len >= n) len = n - 1;
  while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
  memcpy(dst, s, len);
  dst[len] = '\0';
}

#endif

static void add_mpi(void)
{
#ifdef HAVE_MPI
  char built[128];
#if defined(OMPI_MAJOR_VERSION)
  snprintf(built, sizeof built, "Open MPI %d.%d.%d", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
  snprintf(built, sizeof built, "MPICH %s", MPICH_VERSION);
#else
  snprintf(built, sizeof built, "an MPI");
#endif
  /* MPI_Get_library_version may be called before MPI_Init and after MPI_Finalize (the
   * standard's version inquiries), and only reads the library's own version string. */
  char lib[MPI_MAX_LIBRARY_VERSION_STRING], runs[256];
  int len = 0;
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS && len > 0) {
    lib[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    first_line(runs, sizeof runs, lib);
  } else {
    snprintf(runs, sizeof runs, "unknown (MPI_Get_library_version failed)");
  }
  add("mpi: built with %s (MPI %d.%d); runs with %s\n", built, MPI_VERSION, MPI_SUBVERSION, runs);
#else
  add("mpi: none (built without MPI)\n");
#endif
}

static void hwloc_api(char *buf, size_t n, unsigned v)
{
  snprintf(buf, n, "%u.%u.%u", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
}

static void collect(void)
{
  info[0] = '\0';
  add("commit: %s\n", clmoe__build_commit[0] ? clmoe__build_commit : "unknown");
  add("configure: %s\n", CLMOE_BUILD_CONFIGURE_ARGS[0] ? CLMOE_BUILD_CONFIGURE_ARGS : "(no arguments)");
#ifdef __VERSION__
  add("compiler: %s %s (%s)\n", compiler_name(), __VERSION__, CLMOE_BUILD_CC);
#else
  add("compiler: %s (%s)\n", compiler_name(), CLMOE_BUILD_CC);
#endif
  add("opencl-headers: %s, CL_TARGET_OPENCL_VERSION %d\n", CLMOE_BUILD_OPENCL_HEADERS, CL_TARGET_OPENCL_VERSION);
  add_opencl_loader();
  add_mpi();
  add("clblast: %s\n", CLMOE_BUILD_CLBLAST);
  char built[32], runs[32];
  hwloc_api(built, sizeof built, HWLOC_API_VERSION);
  hwloc_api(runs, sizeof runs, hwloc_get_api_version());
  add("hwloc: built with %s (API %s); runs with API %s\n", CLMOE_BUILD_HWLOC, built, runs);
}

const char *clmoe_build_info(void)
{
  if (pthread_once(&info_once, collect) != 0) return "commit: unknown\n";
  return info;
}
