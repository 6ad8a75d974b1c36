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
#include <openssl/sha.h>

/* EVP_PKEY_fromdata selections: macros built from other macros with `|`, which the
   Swift importer does not bring in. */
static inline int outpost_evp_pkey_public_key(void) { return EVP_PKEY_PUBLIC_KEY; }
static inline int outpost_evp_pkey_keypair(void) { return EVP_PKEY_KEYPAIR; }

/* SHA-256 over a context the caller holds (SHA256_CTX is a plain struct), so that a hash
   in progress can be saved and resumed: the server's running hash of an upload
   (ResumableSHA256). OpenSSL 3 marks these deprecated in favour of EVP, which cannot
   export its state; they run the same assembly as EVP's SHA-256. */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
static inline int outpost_sha256_init(SHA256_CTX *c) { return SHA256_Init(c); }
static inline int outpost_sha256_update(SHA256_CTX *c, const void *data, size_t len) { return SHA256_Update(c, data, len); }
static inline int outpost_sha256_final(unsigned char *md, SHA256_CTX *c) { return SHA256_Final(md, c); }
#pragma clang diagnostic pop
#endif
