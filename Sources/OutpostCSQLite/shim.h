#ifndef OUTPOST_CSQLITE_SHIM_H
#define OUTPOST_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
