/* group_mpi.h — the MPI process-group backend (host buffers), and the one
 * place MPI error codes become tl_status.
 *
 * A group owns a duplicate of the communicator it was made from, with
 * MPI_ERRORS_RETURN, so a failing call comes back as TL_ERR_MPI carrying
 * MPI's own message instead of killing the process from inside MPI; the
 * caller decides (the launcher's worker aborts the whole job).
 *
 * Creation also decides how the group waits: by MPI's own busy-polling, or,
 * when the node's ranks outnumber its cores (or TRELLIS_MPI_WAIT=yield), by
 * polling and yielding the core between polls. */
#ifndef TL_CORE_GROUP_MPI_H
#define TL_CORE_GROUP_MPI_H

#include <mpi.h>

#include "core/group.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over `comm`: a group over its members with the same ranks,
 * communicating through a duplicate of `comm` (the caller keeps `comm`).
 * `name` (copied) labels the group in messages. MPI must be initialised. */
tl_status tl_group_mpi_create(MPI_Comm comm, const char* name, tl_group** out);

/* Whether `g` (an MPI group) gives its core away while it waits for a message
 * (TRELLIS_MPI_WAIT; see group_mpi.c). Groups split from it inherit it. */
bool tl_group_mpi_yields(const tl_group* g);

/* Makes `g`'s sends (and its children's) synchronous, as NCCL's are: a
 * send ends only once its receive is posted (MPI_Issend). */
void tl_group_mpi_synchronous_sends(tl_group* g);

/* The communicator behind an MPI group (owned by the group), or
 * MPI_COMM_NULL when `g` uses another backend. */
MPI_Comm tl_group_mpi_comm(const tl_group* g);

/* Records "<call> failed: <MPI's message>" (call = the text up to its first
 * '(') as TL_ERR_MPI and returns TL_ERR_MPI. Use through TL_MPI_CHECK. */
tl_status tl_mpi_error(int code, const char* call, const char* file, int line);

/* Translate an MPI return code at the boundary: TL_MPI_CHECK(MPI_Barrier(c)); */
#define TL_MPI_CHECK(call)                                                             \
  do {                                                                                 \
    int tl__rc = (call);                                                               \
    if (tl__rc != MPI_SUCCESS) return tl_mpi_error(tl__rc, #call, __FILE__, __LINE__); \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
