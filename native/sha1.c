/* SHA-1 (FIPS 180-4), only for trace ids: "t_" + 16 hex of sha1(eval_run_id \x1f problem_id). */
#include <stdint.h>
#include <string.h>

#include "sha1.h"

static uint32_t rol(uint32_t x, int k)
{
    return (x << k) | (x >> (32 - k));
}

static void block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
    for (int t = 16; t < 80; t++)
        w[t] = rol(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999;
        } else if (t < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (t < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t tmp = rol(a, 5) + f + e + k + w[t];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = tmp;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void sha1_init(sha1_ctx *c)
{
    static const uint32_t iv[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    memcpy(c->h, iv, sizeof(iv));
    c->total = 0;
    c->fill = 0;
}

void sha1_update(sha1_ctx *c, const void *data, size_t n)
{
    const unsigned char *p = data;
    c->total += n;
    while (n) {
        size_t take = 64 - c->fill < n ? 64 - c->fill : n;
        memcpy(c->buf + c->fill, p, take);
        c->fill += take;
        p += take;
        n -= take;
        if (c->fill == 64) {
            block(c->h, c->buf);
            c->fill = 0;
        }
    }
}

void sha1_final(sha1_ctx *c, unsigned char out[20])
{
    uint64_t bits = c->total * 8;
    unsigned char pad = 0x80;
    sha1_update(c, &pad, 1);
    unsigned char zero = 0;
    while (c->fill != 56)
        sha1_update(c, &zero, 1);
    unsigned char len[8];
    for (int k = 0; k < 8; k++)
        len[k] = (unsigned char)(bits >> (56 - 8 * k));
    sha1_update(c, len, 8);
    for (int k = 0; k < 5; k++) {
        out[4 * k] = (unsigned char)(c->h[k] >> 24);
        out[4 * k + 1] = (unsigned char)(c->h[k] >> 16);
        out[4 * k + 2] = (unsigned char)(c->h[k] >> 8);
        out[4 * k + 3] = (unsigned char)c->h[k];
    }
}
