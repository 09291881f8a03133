#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "h5frame.h"
#include "error.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(int argc,char**argv){
  int prov; MPI_Init_thread(&argc,&argv,MPI_THREAD_MULTIPLE,&prov);
  size_t n=argc>2?strtoull(argv[2],0,10):3100000; const char*dir=argv[1];
  int rank,size; MPI_Comm_rank(MPI_COMM_WORLD,&rank); MPI_Comm_size(MPI_COMM_WORLD,&size);
  n/=size;
  float*x=malloc(12*n),*v=malloc(12*n),*jp=malloc(4*n); uint64_t*id=malloc(8*n); int32_t*m=malloc(4*n),*o=malloc(4*n);
  for(size_t i=0;i<n;i++){x[3*i]=i;x[3*i+1]=i*2;x[3*i+2]=1;v[3*i]=v[3*i+1]=v[3*i+2]=0.5f;id[i]=i;m[i]=0;o[i]=0;jp[i]=0;}
  const char*names[]={"sand"};
  h5frame_meta meta={.frame=0,.time=0,.dx=0.01,.n_materials=1,.material_names=names,.with_logjp=0};
  h5frame_data d={.n=n,.position=x,.velocity=v,.id=id,.material=m,.owner=o,.logjp=jp};
  for(int f=0;f<5;f++){meta.frame=f; MPI_Barrier(MPI_COMM_WORLD); double t0=now(); int rc=h5frame_write(MPI_COMM_WORLD,dir,&meta,&d); MPI_Barrier(MPI_COMM_WORLD); double t=now()-t0;
    if(rank==0) printf("frame %d rc %d %.3f s  %.2f GB/s\n",f,rc,t, 36.0*n*size/t/1e9); if(rc) printf("%s\n",dr_message());}
  MPI_Finalize(); return 0;}
