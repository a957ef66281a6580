/* clmoe status codes and error messages.
 *
 * Every library function that can fail returns a clmoe_status. Codes extend OpenCL's own:
 * 0 is success, the negative values OpenCL defines (-1 .. -72, and the extension ranges)
 * are passed through unchanged when an OpenCL call fails, and clmoe's own codes live at
 * -3000 and below so they never collide with OpenCL's or CLBlast's (-1024 .. -2048).
 * The library never prints and never exits: after a failure, clmoe_last_error() returns a
 * message (per thread) that names the failing call and its cause. */
#ifndef CLMOE_STATUS_H
#define CLMOE_STATUS_H

#include "api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int clmoe_status;

enum {
  CLMOE_OK = 0,
  CLMOE_ERR_INVALID_ARGUMENT = -3001, /* a bad value passed by the caller */
  CLMOE_ERR_SHAPE = -3002,            /* tensor shapes or dtypes that do not fit together */
  CLMOE_ERR_NO_DEVICE = -3003,        /* no OpenCL platform/device, or none matches --device */
  CLMOE_ERR_OUT_OF_MEMORY = -3004,    /* host or device allocation failed */
  CLMOE_ERR_BUILD = -3005,            /* an OpenCL program failed to compile */
  CLMOE_ERR_IO = -3006,               /* a file could not be read or written */
  CLMOE_ERR_FORMAT = -3007,           /* a file's content is malformed */
  CLMOE_ERR_CLBLAST = -3008,          /* CLBlast returned one of its own error codes */
  CLMOE_ERR_HWLOC = -3009,            /* an hwloc call failed */
  CLMOE_ERR_UNSUPPORTED = -3010,      /* the device or build lacks a needed feature */
  CLMOE_ERR_MPI = -3011,              /* an MPI call failed */
  CLMOE_ERR_CHECK_FAILED = -3012,     /* a conformance check exceeded its tolerance */
  CLMOE_ERR_INTERNAL = -3013,         /* a bug in clmoe: please report it */
  CLMOE_ERR_DAMAGED = -3014           /* a file fails its checksum: damaged on disk or in
                                         transfer, or edited (copy it again) */
};

/* Short constant name of a status: "CL_OUT_OF_RESOURCES", "CLMOE_ERR_SHAPE", ... */
CLMOE_API const char *clmoe_strerror(clmoe_status status);

/* Message describing the last failure on the calling thread ("" when none). Valid until
 * the next failing clmoe call on this thread. */
CLMOE_API const char *clmoe_last_error(void);

/* Forgets the calling thread's last message. */
CLMOE_API void clmoe_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
