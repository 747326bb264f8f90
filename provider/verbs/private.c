/* The private entry points of xdproce's librdmacm.so.1 (version node XDPROCE_PRIVATE_1): rdma_cm's
 * IDs and event channels live in the daemon, in the same session as the context's PDs, CQs and
 * QPs, so librdmacm runs its requests on the context's own control connection. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xdproce.h"

/* xdproce_ctl sends one request, op with body (len bytes, the part after the 12-byte header), on
 * ctx's control connection and reads its reply: its body into reply (size bytes; *rlen its
 * length) and at most maxfds of the fds it carries into rfds (*nrfds of them; the others are
 * closed). It returns 0, or the errno of the failure: the daemon's, EPROTO for a reply that does
 * not fit, EIO once the daemon is gone, EINVAL for a request too long to send. */
XP_EXPORT int xdproce_ctl(struct ibv_context *ctx, uint16_t op, const void *body, size_t len, void *reply, size_t size,
			  size_t *rlen, int *rfds, int maxfds, int *nrfds)
{
	if (nrfds)
		*nrfds = 0;
	if (rlen)
		*rlen = 0;
	struct xp_enc *e = malloc(sizeof(*e));
	uint8_t *buf = malloc(XP_MAX_MSG);
	int err = ENOMEM;
	if (!e || !buf)
		goto out;
	xp_start(e, (enum xp_op)op);
	if (len)
		xp_raw(e, body, len);
	struct xp_dec d;
	int fds[XP_MAX_FDS], n = 0;
	err = xp_call(to_xctx(ctx), e, NULL, 0, buf, XP_MAX_MSG, &d, fds, &n);
	if (err)
		goto out;
	if (d.n > size) {
		err = EPROTO;
		for (int i = 0; i < n; i++)
			close(fds[i]);
		goto out;
	}
	if (d.n)
		memcpy(reply, d.p, d.n);
	if (rlen)
		*rlen = d.n;
	for (int i = 0; i < n; i++) {
		if (rfds && nrfds && i < maxfds)
			rfds[(*nrfds)++] = fds[i];
		else
			close(fds[i]);
	}
out:
	free(e);
	free(buf);
	return err;
}
