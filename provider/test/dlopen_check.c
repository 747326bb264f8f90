/* dlopen_check loads each shared object named on its command line as a program's plugin loader
 * would, with every symbol bound at once (RTLD_NOW), and its constructors run, each in a child
 * process of its own so that a crash is reported as one object's and does not end the run. It prints
 * one line per object, "OK path" or "FAIL path: reason", then "N checks, M failed". test/abi runs it
 * over the Debian packages' objects that link libibverbs, librdmacm, libmlx5 or libefa, with
 * xdproce's libraries first in LD_LIBRARY_PATH and again with Debian's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int load(const char *path)
{
	fflush(stdout);
	int fds[2];
	if (pipe(fds) < 0) {
		printf("FAIL %s: pipe: %s\n", path, strerror(errno));
		return 1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		printf("FAIL %s: fork: %s\n", path, strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return 1;
	}
	if (pid == 0) {
		close(fds[0]);
		if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
			const char *err = dlerror();
			if (write(fds[1], err, strlen(err)) < 0)
				_exit(3);
			_exit(2);
		}
		_exit(0);
	}
	close(fds[1]);
	char reason[1024];
	ssize_t n, len = 0;
	while (len < (ssize_t)sizeof(reason) - 1 && (n = read(fds[0], reason + len, sizeof(reason) - 1 - len)) > 0)
		len += n;
	reason[len] = 0;
	close(fds[0]);
	int status;
	if (waitpid(pid, &status, 0) < 0) {
		printf("FAIL %s: waitpid: %s\n", path, strerror(errno));
		return 1;
	}
	if (WIFSIGNALED(status)) {
		printf("FAIL %s: killed by signal %d (%s)\n", path, WTERMSIG(status), strsignal(WTERMSIG(status)));
		return 1;
	}
	if (WEXITSTATUS(status) != 0) {
		printf("FAIL %s: %s\n", path, len ? reason : "exit status");
		return 1;
	}
	printf("OK %s\n", path);
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0;
	for (int i = 1; i < argc; i++)
		failed += load(argv[i]);
	printf("%d checks, %d failed\n", argc - 1, failed);
	return failed != 0;
}
