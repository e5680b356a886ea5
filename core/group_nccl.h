/* group_nccl.h — the NCCL process-group backend, for CUDA device buffers.
 *
 * An NCCL group is made over the members of an MPI group: rank 0 creates an
 * ncclUniqueId, the MPI group broadcasts it, every member joins one
 * ncclComm on its GPU. The group keeps its own MPI communicator (for splits
 * and barriers) and its own CUDA stream; collectives run on that stream and
 * a request is a CUDA event recorded after the operation, so tl_group_wait
 * blocks the host until the data is there.
 *
 * Without a usable GPU (no device, no driver, trellis built without CUDA)
 * creation fails with TL_ERR_NO_DEVICE and says why. NCCL needs one GPU per
 * rank: two ranks on one device fail at creation. */
#ifndef TL_CORE_GROUP_NCCL_H
#define TL_CORE_GROUP_NCCL_H

#include "core/group.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over `mpi_group` (an MPI group: see group_mpi.h): an NCCL group
 * with the same members and ranks whose buffers live on cuda:`device`.
 * `name` (copied) labels it in messages. The MPI group may be destroyed
 * afterwards. */
tl_status tl_group_nccl_create(tl_group* mpi_group, int device, const char* name, tl_group** out);

/* Whether this build has the NCCL backend (false: built without CUDA). */
bool tl_group_nccl_built(void);

/* Loads libnccl (once; group creation does the same) and finds every entry
 * point trellis calls: TL_OK, TL_ERR_NCCL naming the library or the missing
 * function, TL_ERR_NO_DEVICE in a build without CUDA. Needs no GPU. */
tl_status tl_group_nccl_check(void);

#ifdef __cplusplus
}
#endif

#endif
