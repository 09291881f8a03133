/* comm.c - checked MPI helpers (see comm.h). */
#include "comm.h"

#include <stdio.h>
#include <string.h>

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
  /* MAX picks a failing code if any rank failed; codes are small positive ints. */
  if (MPI_Allreduce(&worst, &out, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS) return DR_EMPI;
  if (out && !status) dr_fail(out, "another rank failed (status %d); see its message", out);
  if (out) dr_mark_agreed();
  return out;
}
