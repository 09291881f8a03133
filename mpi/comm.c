/* comm.c - checked MPI helpers (see comm.h). */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"
#include "watchdog.h"

#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support */
#endif
#endif

int comm_fail(int mpi_rc, const char *file, int line, const char *call) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS) strcpy(text, "unknown MPI error");
  const char *paren = strchr(call, '(');
  int name_len = paren ? (int)(paren - call) : (int)strlen(call);
  char name[128];
  snprintf(name, sizeof name, "%.*s", name_len < 127 ? name_len : 127, call);
  return dr_fail_at(DR_EMPI, file, line, name, "%s", text);
}

int comm_agree(MPI_Comm comm, int status) {
  int worst = status ? status : 0, out = 0;
  /* MAX picks a failing code if any rank failed; codes are small positive ints. Through the
   * watchdog: a rank that never comes to the agreement ends the job, not hangs it. */
  if (comm_allreduce(&worst, &out, 1, MPI_INT, MPI_MAX, comm, "the ranks' agreement that all went well") != DR_OK)
    return DR_EMPI;
  return comm_agreed(status, out);
}

int comm_agreed(int status, int worst) {
  if (worst && !status) dr_fail(worst, "another rank failed (status %d); see its message", worst);
  if (worst) dr_mark_agreed();
  return worst;
}

int comm_cuda_aware(void) {
  const int mode = settings()->cuda_aware_mpi;
  if (mode != SETTING_AUTO) return mode == SETTING_ON;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return 0;
#endif
}

int comm_local(MPI_Comm comm, int *local_rank, int *local_size) {
  MPI_Comm node;
  DR_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int e = MPI_Comm_rank(node, local_rank);
  if (e == MPI_SUCCESS) e = MPI_Comm_size(node, local_size);
  const int freed = MPI_Comm_free(&node);
  if (e != MPI_SUCCESS) return comm_fail(e, __FILE__, __LINE__, "MPI_Comm_rank/size(node communicator)");
  if (freed != MPI_SUCCESS) return comm_fail(freed, __FILE__, __LINE__, "MPI_Comm_free(node communicator)");
  return DR_OK;
}

