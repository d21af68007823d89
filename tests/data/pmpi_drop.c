/* A PMPI interposer that silently drops MPI operations, for the mutation tests of the data checks
 * (tests/integration/test_data_mutations.py). Built in the test with the venv's mpicc, loaded with
 * LD_PRELOAD. Past ACCEPTANCE_TEST_DROP_ONSET calls (default 100) of the operation named by
 * ACCEPTANCE_TEST_DROP (MPI_Allreduce, MPI_Alltoall, MPI_Put or MPI_Get; unset: drop nothing), every
 * ACCEPTANCE_TEST_DROP_EVERY-th call (default 2) returns MPI_SUCCESS without doing anything.
 * The large-count variants (_c, which mpi4py 4 uses) count and drop alike. Each process prints
 * how many calls it dropped to stderr at MPI_Finalize. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long calls, dropped;
static int which = -1;  /* 0 Allreduce, 1 Alltoall, 2 Put, 3 Get; -1 none */
static long onset = 100, every = 2;

static void setup(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *name = getenv("ACCEPTANCE_TEST_DROP");
    if (name && !strcmp(name, "MPI_Allreduce")) which = 0;
    else if (name && !strcmp(name, "MPI_Alltoall")) which = 1;
    else if (name && !strcmp(name, "MPI_Put")) which = 2;
    else if (name && !strcmp(name, "MPI_Get")) which = 3;
    const char *v = getenv("ACCEPTANCE_TEST_DROP_ONSET");
    if (v) onset = atol(v);
    v = getenv("ACCEPTANCE_TEST_DROP_EVERY");
    if (v && atol(v) > 0) every = atol(v);
}

static int drop(int op) {
    setup();
    if (op != which) return 0;
    calls++;
    if (calls > onset && (calls - onset) % every == 0) {
        dropped++;
        return 1;
    }
    return 0;
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op o, MPI_Comm c) {
    return drop(0) ? MPI_SUCCESS : PMPI_Allreduce(s, r, n, t, o, c);
}
int MPI_Allreduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype t, MPI_Op o, MPI_Comm c) {
    return drop(0) ? MPI_SUCCESS : PMPI_Allreduce_c(s, r, n, t, o, c);
}
int MPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c) {
    return drop(1) ? MPI_SUCCESS : PMPI_Alltoall(s, sn, st, r, rn, rt, c);
}
int MPI_Alltoall_c(const void *s, MPI_Count sn, MPI_Datatype st, void *r, MPI_Count rn, MPI_Datatype rt,
                   MPI_Comm c) {
    return drop(1) ? MPI_SUCCESS : PMPI_Alltoall_c(s, sn, st, r, rn, rt, c);
}
int MPI_Put(const void *o, int on, MPI_Datatype ot, int rank, MPI_Aint d, int tn, MPI_Datatype tt, MPI_Win w) {
    return drop(2) ? MPI_SUCCESS : PMPI_Put(o, on, ot, rank, d, tn, tt, w);
}
int MPI_Put_c(const void *o, MPI_Count on, MPI_Datatype ot, int rank, MPI_Aint d, MPI_Count tn, MPI_Datatype tt,
              MPI_Win w) {
    return drop(2) ? MPI_SUCCESS : PMPI_Put_c(o, on, ot, rank, d, tn, tt, w);
}
int MPI_Get(void *o, int on, MPI_Datatype ot, int rank, MPI_Aint d, int tn, MPI_Datatype tt, MPI_Win w) {
    return drop(3) ? MPI_SUCCESS : PMPI_Get(o, on, ot, rank, d, tn, tt, w);
}
int MPI_Get_c(void *o, MPI_Count on, MPI_Datatype ot, int rank, MPI_Aint d, MPI_Count tn, MPI_Datatype tt,
              MPI_Win w) {
    return drop(3) ? MPI_SUCCESS : PMPI_Get_c(o, on, ot, rank, d, tn, tt, w);
}
int MPI_Finalize(void) {
    setup();
    if (which >= 0)
        fprintf(stderr, "pmpi_drop: dropped %ld of %ld calls\n", dropped, calls);
    return PMPI_Finalize();
}
