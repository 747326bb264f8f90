/* Two MPI ranks: rank 0 sends 1 MiB to rank 1, which adds one to every int and sends it back, ten
 * times, each byte checked; then an allreduce. TestOpenMPI compiles it with mpicc. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	enum { N = 1 << 18 };
	int *buf = malloc(N * sizeof(int));
	for (int round = 0; round < 10; round++) {
		if (rank == 0) {
			for (int i = 0; i < N; i++)
				buf[i] = i * 7 + round;
			MPI_Send(buf, N, MPI_INT, 1, round, MPI_COMM_WORLD);
			MPI_Recv(buf, N, MPI_INT, 1, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (int i = 0; i < N; i++)
				if (buf[i] != i * 7 + round + 1) {
					fprintf(stderr, "rank 0: round %d: buf[%d] = %d\n", round, i, buf[i]);
					MPI_Abort(MPI_COMM_WORLD, 1);
				}
		} else if (rank == 1) {
			MPI_Recv(buf, N, MPI_INT, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (int i = 0; i < N; i++)
				buf[i]++;
			MPI_Send(buf, N, MPI_INT, 0, round, MPI_COMM_WORLD);
		}
	}
	long mine = rank + 1, sum = 0;
	MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (sum != (long)size * (size + 1) / 2) {
		fprintf(stderr, "rank %d: allreduce %ld\n", rank, sum);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	printf("rank %d of %d: ok\n", rank, size);
	free(buf);
	MPI_Finalize();
	return 0;
}
