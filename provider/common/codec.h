/* The encoding of the daemon's control messages (docs/daemon.md): little-endian fields, `bytes`
 * as a u16 length then the bytes. Shared by libibverbs.so.1 and librdmacm.so.1. */
#ifndef XDPROCE_CODEC_H
#define XDPROCE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A request being built (requests are short): a field that does not fit sets overflow. */
struct xp_enc {
	uint8_t b[1024];
	size_t n;
	bool overflow;
};

/* A reply being read: the first field that overruns it sets err, and every later read returns
 * zero. */
struct xp_dec {
	const uint8_t *p;
	size_t n;
	bool err;
};

void xp_u8(struct xp_enc *e, uint8_t v);
void xp_u16(struct xp_enc *e, uint16_t v);
void xp_u32(struct xp_enc *e, uint32_t v);
void xp_u64(struct xp_enc *e, uint64_t v);
void xp_raw(struct xp_enc *e, const void *p, size_t n);
void xp_bytes(struct xp_enc *e, const void *p, size_t n); /* u16 length, then the bytes */

uint8_t xp_get_u8(struct xp_dec *d);
uint16_t xp_get_u16(struct xp_dec *d);
uint32_t xp_get_u32(struct xp_dec *d);
uint64_t xp_get_u64(struct xp_dec *d);
bool xp_get_bool(struct xp_dec *d);
const uint8_t *xp_get_raw(struct xp_dec *d, size_t n);
const uint8_t *xp_get_bytes(struct xp_dec *d, uint16_t *n);

#endif
