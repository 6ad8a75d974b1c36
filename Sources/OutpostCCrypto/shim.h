#ifndef OUTPOST_CCRYPTO_SHIM_H
#define OUTPOST_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/param_build.h>
#include <openssl/core_names.h>

/* EVP_PKEY_fromdata selections: macros built from other macros with `|`, which the
   Swift importer does not bring in. */
static inline int outpost_evp_pkey_public_key(void) { return EVP_PKEY_PUBLIC_KEY; }
static inline int outpost_evp_pkey_keypair(void) { return EVP_PKEY_KEYPAIR; }
#endif
