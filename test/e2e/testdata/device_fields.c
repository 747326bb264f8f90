/* Prints what a program learns of the first device from libibverbs: the struct ibv_device fields and
 * files read through ibv_read_sysfs_file (rdma-core's driver.h call, declared here: Debian's
 * libibverbs-dev does not install driver.h). TestDiscoveryDeviceFields runs it. */
#include <infiniband/verbs.h>
#include <stdio.h>

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

static void show(const char *dir, const char *file)
{
	char buf[128];
	int n = ibv_read_sysfs_file(dir, file, buf, sizeof(buf));
	printf("%s=%s\n", file, n >= 0 ? buf : "-");
}

int main(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	struct ibv_device *d = l[0];
	printf("name=%s\ndev_name=%s\ndev_path=%s\nibdev_path=%s\nnode_type=%d\ntransport_type=%d\n", d->name,
	       d->dev_name, d->dev_path, d->ibdev_path, d->node_type, d->transport_type);
	show(d->ibdev_path, "node_type");
	show(d->ibdev_path, "ports/1/gid_attrs/types/1");
	show(d->dev_path, "abi_version");
	ibv_free_device_list(l);
	return 0;
}
