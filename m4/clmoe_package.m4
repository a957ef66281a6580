# CLMOE_WITH_PACKAGE(NAME, PKGCONFIG-NAME, HEADER, FUNCTION, LIBRARY, DEBIAN-PACKAGES)
#
# Finds a required C library and sets NAME_CFLAGS, NAME_LIBS (NAME upper-cased) and
# NAME_FOUND_BY (how it was found, for the summary). Order:
#   --with-NAME=DIR   DIR/include and DIR/lib64 or DIR/lib, nothing else;
#   pkg-config PKGCONFIG-NAME;
#   the compiler's default paths (HEADER and -lLIBRARY).
# A miss is a hard error that names the Debian packages to install.
# Records in clmoe_pc_requires / clmoe_pc_libs what clmoe.pc must list privately.
AC_DEFUN([CLMOE_WITH_PACKAGE], [
  m4_pushdef([UP], m4_toupper([$1]))
  AC_ARG_WITH([$1],
    [AS_HELP_STRING([--with-$1=DIR], [where $2 is installed (DIR/include, DIR/lib)])],
    [], [with_$1=check])
  UP[]_FOUND_BY=""
  AS_CASE([$with_$1],
    [no], [AC_MSG_ERROR([$2 is required; --without-$1 is not possible])],
    [check|yes], [
      PKG_CHECK_MODULES(UP, [$2], [
        UP[]_FOUND_BY="pkg-config $2 `$PKG_CONFIG --modversion $2`"
        clmoe_pc_requires="$clmoe_pc_requires $2"], [:])],
    [
      UP[]_CFLAGS="-I$with_$1/include"
      AS_IF([test -d "$with_$1/lib64"], [UP[]_LIBS="-L$with_$1/lib64 -l$5"],
                                        [UP[]_LIBS="-L$with_$1/lib -l$5"])
      UP[]_FOUND_BY="--with-$1=$with_$1"
      clmoe_pc_libs="$clmoe_pc_libs $UP[]_LIBS"])
  AS_IF([test -z "$UP[]_FOUND_BY"], [
    UP[]_CFLAGS=""
    UP[]_LIBS="-l$5"
    UP[]_FOUND_BY="default paths"
    clmoe_pc_libs="$clmoe_pc_libs -l$5"])
  clmoe_pkg_save_CPPFLAGS=$CPPFLAGS
  clmoe_pkg_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $UP[]_CFLAGS $OPENCL_CFLAGS"
  LIBS="$UP[]_LIBS $OPENCL_LIBS $LIBS"
  AC_CHECK_HEADER([$3], [],
    [AC_MSG_ERROR([$2 header $3 not found ($UP[]_FOUND_BY).
  On Debian/Ubuntu: apt-get install $6; or give --with-$1=DIR.])])
  AC_MSG_CHECKING([whether $2 links ($4)])
  AC_LINK_IFELSE([AC_LANG_CALL([], [$4])], [AC_MSG_RESULT([yes])], [
    AC_MSG_RESULT([no])
    AC_MSG_ERROR([cannot link against $2 with '$UP[]_LIBS'.
  On Debian/Ubuntu: apt-get install $6; or give --with-$1=DIR.])])
  CPPFLAGS=$clmoe_pkg_save_CPPFLAGS
  LIBS=$clmoe_pkg_save_LIBS
  AC_SUBST(UP[]_CFLAGS)
  AC_SUBST(UP[]_LIBS)
  m4_popdef([UP])
])

# CLMOE_CHECK_MPI: --with-mpi=auto|yes|no through the MPI compiler wrapper ($MPICC, else
# mpicc). Sets MPI_CFLAGS/MPI_LIBS from the wrapper's --showme (Open MPI) or -show (MPICH),
# HAVE_MPI, the automake conditional HAVE_MPI, MPIRUN, and clmoe_mpi_summary.
AC_DEFUN([CLMOE_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi=auto|yes|no], [build the MPI layer (default: auto)])],
    [], [with_mpi=auto])
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper used to find MPI's flags])
  have_mpi=no
  clmoe_mpi_summary="no (--with-mpi=$with_mpi)"
  AS_IF([test "x$with_mpi" != xno], [
    AS_IF([test -z "$MPICC"], [AC_PATH_PROGS([MPICC], [mpicc], [])])
    AS_IF([test -n "$MPICC"], [
      clmoe_mpi_c=`$MPICC --showme:compile 2>/dev/null` || clmoe_mpi_c=""
      clmoe_mpi_l=`$MPICC --showme:link 2>/dev/null` || clmoe_mpi_l=""
      AS_IF([test -z "$clmoe_mpi_c$clmoe_mpi_l"], [
        # MPICH-style wrapper: "-show" prints the whole command line.
        clmoe_mpi_all=`$MPICC -show 2>/dev/null | cut -d' ' -f2-`
        clmoe_mpi_c=`for w in $clmoe_mpi_all; do case $w in -I*|-D*) printf '%s ' "$w";; esac; done`
        clmoe_mpi_l=`for w in $clmoe_mpi_all; do case $w in -L*|-l*|-Wl*) printf '%s ' "$w";; esac; done`])
      MPI_CFLAGS=$clmoe_mpi_c
      MPI_LIBS=$clmoe_mpi_l
      clmoe_mpi_save_CPPFLAGS=$CPPFLAGS
      clmoe_mpi_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $MPI_CFLAGS"
      LIBS="$MPI_LIBS $LIBS"
      AC_MSG_CHECKING([whether MPI programs link through $MPICC's flags])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([#include <mpi.h>], [MPI_Init(0, 0); MPI_Finalize();])],
        [have_mpi=yes], [have_mpi=no])
      AC_MSG_RESULT([$have_mpi])
      CPPFLAGS=$clmoe_mpi_save_CPPFLAGS
      LIBS=$clmoe_mpi_save_LIBS])
    AS_IF([test "x$have_mpi" = xno && test "x$with_mpi" = xyes],
      [AC_MSG_ERROR([--with-mpi=yes but no working MPI compiler wrapper was found.
  On Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin; or set MPICC.])])
    AS_IF([test "x$have_mpi" = xyes], [
      AC_PATH_PROGS([MPIRUN], [mpirun mpiexec], [])
      clmoe_mpi_summary="yes ($MPICC; launcher ${MPIRUN:-none found})"
      AC_DEFINE([HAVE_MPI], [1], [Define to 1 when the MPI layer is built])],
      [clmoe_mpi_summary="no (no working mpicc; apt-get install libopenmpi-dev openmpi-bin)"])
  ])
  AC_SUBST([MPI_CFLAGS])
  AC_SUBST([MPI_LIBS])
  AC_SUBST([MPIRUN])
  AM_CONDITIONAL([HAVE_MPI], [test "x$have_mpi" = xyes])
])
