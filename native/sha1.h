#ifndef SD_SHA1_H
#define SD_SHA1_H
#include <stddef.h>
#include <stdint.h>
typedef struct {
    uint32_t h[5];
    uint64_t total;
    unsigned char buf[64];
    size_t fill;
} sha1_ctx;
void sha1_init(sha1_ctx *c);
void sha1_update(sha1_ctx *c, const void *data, size_t n);
void sha1_final(sha1_ctx *c, unsigned char out[20]);
#endif
