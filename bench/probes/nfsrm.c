/*
 * nfsrm: removes files through the server, so that a server holding them
 * open (Ganesha's and Keel's descriptor caches) frees their space; a
 * removal behind the server's back would leave it pinned.
 *
 *   nfsrm nfs://SERVER/EXPORT?ARGS NAME...
 */
#include <sys/time.h>
#include <nfsc/libnfs.h>
#include <stdint.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *u;
	int failed = 0;
	if (argc < 2 || !nfs) {
		fprintf(stderr, "usage: nfsrm nfs://SERVER/EXPORT NAME...\n");
		return 2;
	}
	u = nfs_parse_url_dir(nfs, argv[1]);
	if (!u || nfs_mount(nfs, u->server, u->path) != 0) {
		fprintf(stderr, "nfsrm: cannot mount %s: %s\n", argv[1], nfs_get_error(nfs));
		return 1;
	}
	for (int i = 2; i < argc; i++) {
		char path[4096];
		snprintf(path, sizeof path, "/%s", argv[i]);
		if (nfs_unlink(nfs, path) != 0) {
			fprintf(stderr, "nfsrm: %s: %s\n", argv[i], nfs_get_error(nfs));
			failed = 1;
		}
	}
	nfs_destroy_url(u);
	nfs_destroy_context(nfs);
	return failed;
}
