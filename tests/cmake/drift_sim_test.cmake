# drift_sim_test(): one row of the simulation tests' table (tests/sim/CMakeLists.txt), registered
# once for each backend the row lists (SUNDIALS' and libCEED's tests, one source for every backend).
#
#   drift_sim_test(NAME [EXE target] [SOURCES file...] [RANKS n] BACKENDS backend... [CPU_ARG]
#                  [ARGS arg...] [ENV VAR=VALUE...] [DEVICES list] [TIMEOUT s] [PROCESSORS n]
#                  [VARIANT suffix] [EXPECT regex...])
#
# EXE, the test executable, defaults to NAME; it is built from SOURCES (default EXE.c) and linked
# with the core the first time a row names it, so that several rows share one executable.
# BACKENDS: cpu, cuda, island. cpu registers NAME (label cpu, or mpi where RANKS > 1; the
# executable gets the argument cpu only with CPU_ARG, its default being the CPU backend anyway);
# cuda registers NAME_cuda and island NAME_island (label gpu; the argument cuda; island with
# DRIFT_DEVICES=DEVICES, default 0,0: an island of two members standing on one GPU, so that the
# island's code runs where one GPU is lent). A test named VARIANT after the backend's suffix
# (test_ranks_2_island_ahead: NAME test_ranks_2, VARIANT _ahead) is a row of its own settings.
# The command is the executable, the backend's argument, then ARGS; with RANKS > 1 under
# mpirun -n RANKS --oversubscribe; with EXPECT through check_output.sh, which passes where it
# exits 0 and its output holds every EXPECT pattern (grep regexes; the trace's lines may hold them).
# Every variant skips on exit status 77 (a cuda run without a usable GPU). The environment: one rank
# OMP_NUM_THREADS=2 (the CPU backend's loops split between threads); several ranks mpirun as root,
# and OMP_NUM_THREADS=1 on cpu; then the island's DRIFT_DEVICES; then ENV (later values win).
# TIMEOUT and PROCESSORS where given; drift_test_defaults() (tests/CMakeLists.txt) then sets the
# cores (DRIFT_RANKS x threads) and the long tests' limit.
function(drift_sim_test name)
  cmake_parse_arguments(T "CPU_ARG" "EXE;RANKS;DEVICES;TIMEOUT;PROCESSORS;VARIANT"
                        "SOURCES;BACKENDS;ARGS;ENV;EXPECT" ${ARGN})
  if(T_UNPARSED_ARGUMENTS OR NOT T_BACKENDS)
    message(FATAL_ERROR "drift_sim_test(${name}): expected BACKENDS cpu|cuda|island and known keywords, "
                        "not '${T_UNPARSED_ARGUMENTS}'")
  endif()
  if(NOT T_EXE)
    set(T_EXE ${name})
  endif()
  if(NOT T_RANKS)
    set(T_RANKS 1)
  endif()
  if(NOT T_DEVICES)
    set(T_DEVICES 0,0)
  endif()
  if(NOT TARGET ${T_EXE})
    if(NOT T_SOURCES)
      set(T_SOURCES ${T_EXE}.c)
    endif()
    add_executable(${T_EXE} ${T_SOURCES})
    target_link_libraries(${T_EXE} PRIVATE drift_core)
    target_include_directories(${T_EXE} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
    target_compile_definitions(${T_EXE} PRIVATE _DEFAULT_SOURCE)
  endif()
  foreach(backend IN LISTS T_BACKENDS)
    set(env "")
    if(T_RANKS GREATER 1)
      set(env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    endif()
    if(backend STREQUAL "cpu")
      set(suffix "")
      set(label cpu)
      if(T_RANKS GREATER 1)
        set(label mpi)
        list(APPEND env "OMP_NUM_THREADS=1")
      endif()
      set(arg "")
      if(T_CPU_ARG)
        set(arg cpu)
      endif()
    elseif(backend STREQUAL "cuda" OR backend STREQUAL "island")
      set(suffix _${backend})
      set(label gpu)
      set(arg cuda)
    else()
      message(FATAL_ERROR "drift_sim_test(${name}): backend '${backend}': expected cpu, cuda or island")
    endif()
    if(T_RANKS EQUAL 1)
      list(APPEND env "OMP_NUM_THREADS=2")
    endif()
    if(backend STREQUAL "island")
      list(APPEND env "DRIFT_DEVICES=${T_DEVICES}")
    endif()
    list(APPEND env ${T_ENV})
    set(test ${name}${suffix}${T_VARIANT})
    set(command $<TARGET_FILE:${T_EXE}> ${arg} ${T_ARGS})
    if(T_RANKS GREATER 1)
      set(command ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${T_RANKS} --oversubscribe ${command})
    endif()
    if(T_EXPECT)
      set(command sh ${CMAKE_SOURCE_DIR}/tests/sim/check_output.sh ${T_EXPECT} -- ${command})
    endif()
    add_test(NAME ${test} COMMAND ${command})
    set_tests_properties(${test} PROPERTIES LABELS ${label} SKIP_RETURN_CODE 77 ENVIRONMENT "${env}"
                         DRIFT_RANKS ${T_RANKS})
    if(T_TIMEOUT)
      set_tests_properties(${test} PROPERTIES TIMEOUT ${T_TIMEOUT})
    endif()
    if(T_PROCESSORS)
      set_tests_properties(${test} PROPERTIES PROCESSORS ${T_PROCESSORS})
    endif()
  endforeach()
  drift_defer_test_defaults()
endfunction()
