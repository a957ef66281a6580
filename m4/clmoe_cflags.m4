# CLMOE_CHECK_CFLAG(FLAG, ACTION-IF-ACCEPTED, [ACTION-IF-REJECTED])
# Checks whether the C compiler accepts FLAG (warnings as errors, so that a compiler that
# only warns about an unknown flag counts as rejecting it). Written for clmoe so that build
# hosts need no autoconf-archive.
AC_DEFUN([CLMOE_CHECK_CFLAG], [
  AS_VAR_PUSHDEF([clmoe_cv], [clmoe_cv_cflag_$1])
  AC_CACHE_CHECK([whether $CC accepts $1], [clmoe_cv], [
    clmoe_cflag_save=$CFLAGS
    CFLAGS="$CFLAGS -Werror $1"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [return 0;])],
                      [AS_VAR_SET([clmoe_cv], [yes])], [AS_VAR_SET([clmoe_cv], [no])])
    CFLAGS=$clmoe_cflag_save])
  AS_VAR_IF([clmoe_cv], [yes], [$2], [$3])
  AS_VAR_POPDEF([clmoe_cv])
])

# CLMOE_PTHREAD: finds the flags for POSIX threads (-pthread where the compiler takes it,
# else -lpthread) and adds them to CFLAGS/LIBS.
AC_DEFUN([CLMOE_PTHREAD], [
  CLMOE_CHECK_CFLAG([-pthread], [CFLAGS="$CFLAGS -pthread"; LIBS="$LIBS -pthread"],
                    [AC_SEARCH_LIBS([pthread_create], [pthread], [],
                       [AC_MSG_ERROR([POSIX threads are required])])])
])
