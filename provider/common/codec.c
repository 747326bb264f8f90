/* The daemon's control messages, little-endian: what both libraries encode and decode with
 * (docs/daemon.md). Each library links its own hidden copy. */
#include <string.h>

#include "codec.h"

void xp_raw(struct xp_enc *e, const void *p, size_t n)
{
	if (e->overflow || n > sizeof(e->b) - e->n) {
		e->overflow = true;
		return;
	}
	memcpy(e->b + e->n, p, n);
	e->n += n;
}

void xp_u8(struct xp_enc *e, uint8_t v) { xp_raw(e, &v, 1); }

void xp_u16(struct xp_enc *e, uint16_t v)
{
	uint8_t b[2] = {v, v >> 8};
	xp_raw(e, b, 2);
}

void xp_u32(struct xp_enc *e, uint32_t v)
{
	uint8_t b[4] = {v, v >> 8, v >> 16, v >> 24};
	xp_raw(e, b, 4);
}

void xp_u64(struct xp_enc *e, uint64_t v)
{
	xp_u32(e, (uint32_t)v);
	xp_u32(e, (uint32_t)(v >> 32));
}

void xp_bytes(struct xp_enc *e, const void *p, size_t n)
{
	if (n > 0xffff) {
		e->overflow = true;
		return;
	}
	xp_u16(e, (uint16_t)n);
	xp_raw(e, p, n);
}

const uint8_t *xp_get_raw(struct xp_dec *d, size_t n)
{
	if (d->err || n > d->n) {
		d->err = true;
		return NULL;
	}
	const uint8_t *p = d->p;
	d->p += n;
	d->n -= n;
	return p;
}

uint8_t xp_get_u8(struct xp_dec *d)
{
	const uint8_t *p = xp_get_raw(d, 1);
	return p ? p[0] : 0;
}

uint16_t xp_get_u16(struct xp_dec *d)
{
	const uint8_t *p = xp_get_raw(d, 2);
	return p ? (uint16_t)(p[0] | p[1] << 8) : 0;
}

uint32_t xp_get_u32(struct xp_dec *d)
{
	const uint8_t *p = xp_get_raw(d, 4);
	return p ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24 : 0;
}

uint64_t xp_get_u64(struct xp_dec *d)
{
	uint64_t lo = xp_get_u32(d);
	return lo | (uint64_t)xp_get_u32(d) << 32;
}

bool xp_get_bool(struct xp_dec *d)
{
	uint8_t v = xp_get_u8(d);
	if (v > 1)
		d->err = true;
	return v == 1;
}

const uint8_t *xp_get_bytes(struct xp_dec *d, uint16_t *n)
{
	*n = xp_get_u16(d);
	return xp_get_raw(d, *n);
}
