/* group_emul.h — process groups with NCCL's ordering, over MPI, so that a
 * CPU job shows what the same calls would do on NCCL (TRELLIS_EMULATE=nccl).
 *
 * NCCL runs a communicator's operations one after another on its stream,
 * in the order they were issued, and a send ends only when its receive has
 * been posted on the peer. MPI does neither: its nonblocking operations
 * progress side by side and a send may end as soon as its data is copied
 * out. A group made here keeps a queue per group: an operation is handed
 * to MPI only when every one issued before it on the group has completed,
 * and sends are synchronous (MPI_Issend). An order of calls that would
 * deadlock on NCCL — a send queued before a receive its peer needs first —
 * then deadlocks here every time, and the watchdog names the operation at
 * the head of the queue that is stuck (parallel.timeout_s).
 *
 * Buffers in host memory: the CPU's, or an emulated GPU's
 * (TRELLIS_EMULATE=cuda, kernels/emul/emul.h), which is host memory too;
 * `device` is the one the group's buffers live on, and an operation runs
 * the work issued to it before the operation first (tl_device_run_to), as
 * NCCL's stream waits for the CUDA groups' event. The calls, their
 * checks, counts and errors are group.h's. */
#ifndef TL_CORE_GROUP_EMUL_H
#define TL_CORE_GROUP_EMUL_H

#include "core/group.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over the members of `mpi_group` (an MPI group): a group over
 * the same members with NCCL's ordering, on a communicator of its own, for
 * buffers on `device`. Groups split from it keep the ordering. */
tl_status tl_group_emul_create(tl_group* mpi_group, tl_device device, const char* name,
                               tl_group** out);

#ifdef __cplusplus
}
#endif

#endif
