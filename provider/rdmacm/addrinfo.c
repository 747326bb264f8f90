/* rdma_getaddrinfo: libc's getaddrinfo with rdma_cm's hints, as librdmacm converts them. There
 * is no ibacm: no route or connect data comes with a result. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

static int copy_addr(struct sockaddr **dst, socklen_t *len, const struct sockaddr *src, socklen_t n)
{
	*dst = malloc(n);
	if (!*dst)
		return set_errno(ENOMEM);
	memcpy(*dst, src, n);
	*len = n;
	return 0;
}

static void to_ai(struct addrinfo *ai, const struct rdma_addrinfo *h)
{
	memset(ai, 0, sizeof(*ai));
	if (h->ai_flags & RAI_PASSIVE)
		ai->ai_flags = AI_PASSIVE;
	if (h->ai_flags & RAI_NUMERICHOST)
		ai->ai_flags |= AI_NUMERICHOST;
	if (h->ai_family != AF_IB)
		ai->ai_family = h->ai_family;
	switch (h->ai_qp_type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		ai->ai_socktype = SOCK_STREAM;
		break;
	case IBV_QPT_UD:
		ai->ai_socktype = SOCK_DGRAM;
		break;
	default:
		break;
	}
	switch (h->ai_port_space) {
	case RDMA_PS_TCP:
		ai->ai_protocol = IPPROTO_TCP;
		break;
	case RDMA_PS_IPOIB:
	case RDMA_PS_UDP:
		ai->ai_protocol = IPPROTO_UDP;
		break;
	case RDMA_PS_IB:
		ai->ai_protocol = ai->ai_socktype == SOCK_STREAM ? IPPROTO_TCP
				  : ai->ai_socktype == SOCK_DGRAM ? IPPROTO_UDP
								  : 0;
		break;
	default:
		break;
	}
}

static int from_ai(struct rdma_addrinfo *r, const struct rdma_addrinfo *h, const struct addrinfo *ai)
{
	if (h->ai_qp_type)
		r->ai_qp_type = h->ai_qp_type;
	else if (ai->ai_socktype == SOCK_STREAM)
		r->ai_qp_type = IBV_QPT_RC;
	else if (ai->ai_socktype == SOCK_DGRAM)
		r->ai_qp_type = IBV_QPT_UD;
	if (h->ai_port_space)
		r->ai_port_space = h->ai_port_space;
	else if (ai->ai_protocol == IPPROTO_TCP)
		r->ai_port_space = RDMA_PS_TCP;
	else if (ai->ai_protocol == IPPROTO_UDP)
		r->ai_port_space = RDMA_PS_UDP;
	/* AF_IB addresses (RAI_FAMILY with AF_IB) are InfiniBand's: xdproce speaks RoCE over IP. */
	if ((h->ai_flags & RAI_FAMILY) && h->ai_family == AF_IB)
		return set_errno(EAFNOSUPPORT);
	r->ai_family = ai->ai_family;
	if (ai->ai_flags & AI_PASSIVE) {
		r->ai_flags = RAI_PASSIVE;
		if (ai->ai_canonname && !(r->ai_src_canonname = strdup(ai->ai_canonname)))
			return set_errno(ENOMEM);
		return copy_addr(&r->ai_src_addr, &r->ai_src_len, ai->ai_addr, ai->ai_addrlen);
	}
	if (ai->ai_canonname && !(r->ai_dst_canonname = strdup(ai->ai_canonname)))
		return set_errno(ENOMEM);
	return copy_addr(&r->ai_dst_addr, &r->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
}

XP_EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			       struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	if ((!service && !node && !hints) || !res)
		return set_errno(EINVAL);
	struct rdma_addrinfo *r = calloc(1, sizeof(*r));
	if (!r)
		return set_errno(ENOMEM);
	int ret = 0;
	const struct rdma_addrinfo *h = hints ? hints : &nohints;
	if (node || service) {
		struct addrinfo aih, *ai;
		to_ai(&aih, h);
		/* libc's EAI_* codes are returned as they are (negative), for gai_strerror. */
		ret = getaddrinfo(node, service, hints ? &aih : NULL, &ai);
		if (!ret) {
			ret = from_ai(r, h, ai); /* the first result only, as librdmacm */
			freeaddrinfo(ai);
		}
	} else {
		r->ai_flags = h->ai_flags;
		r->ai_family = h->ai_family;
		r->ai_qp_type = h->ai_qp_type;
		r->ai_port_space = h->ai_port_space;
		if (h->ai_dst_len)
			ret = copy_addr(&r->ai_dst_addr, &r->ai_dst_len, h->ai_dst_addr, h->ai_dst_len);
	}
	if (!ret && !r->ai_src_len && h->ai_src_len)
		ret = copy_addr(&r->ai_src_addr, &r->ai_src_len, h->ai_src_addr, h->ai_src_len);
	if (ret) {
		rdma_freeaddrinfo(r);
		return ret;
	}
	*res = r;
	return 0;
}

XP_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *r = res;
		res = r->ai_next;
		free(r->ai_connect);
		free(r->ai_route);
		free(r->ai_src_canonname);
		free(r->ai_dst_canonname);
		free(r->ai_src_addr);
		free(r->ai_dst_addr);
		free(r);
	}
}
