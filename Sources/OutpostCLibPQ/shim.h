#ifndef OUTPOST_CLIBPQ_SHIM_H
#define OUTPOST_CLIBPQ_SHIM_H
// Debian's libpq-dev puts the header under /usr/include/postgresql; a system-library
// target cannot add an include path, so the shim names it from /usr/include.
#include <postgresql/libpq-fe.h>
#endif
