#ifndef OUTPOST_CZLIB_SHIM_H
#define OUTPOST_CZLIB_SHIM_H
#include <zlib.h>
#endif
