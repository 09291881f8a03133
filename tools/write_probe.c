/* write_probe.c - the filesystem's speed for a frame-sized file written several ways: write() of 16 MiB
 * pieces from one thread; THREADS threads each writing its slice; the space allocated first
 * (posix_fallocate), then mmap and a copy by THREADS threads; mmap of a file sized by ftruncate and
 * the same copy; allocated first, then write() from one thread; mapped, the space allocated 16 MiB
 * at a time by one thread while the others copy the pieces already allocated (pipelined); the
 * same with each thread allocating and copying slices of its own; allocated first, then a mapping
 * populated at once (MAP_POPULATE) and the copy by THREADS threads; the last, each phase of it timed apart;
 * then 16 MiB pieces handed out in turn to THREADS threads, the first writing its pieces with write()
 * (tmpfs takes one write() at a time in a file, and zeroes no page a write fills) while the others copy
 * theirs into a mapping, over the size ftruncate set and over space allocated first; then two files at a
 * time, each allocated first, mapped and copied by THREADS/2 threads, from two threads of one process and
 * from two processes; and one file with each thread mapping its own slice (whether the page work
 * contends per file, per mapping, per process or in the whole kernel); then the frame's own pattern, six
 * datasets (a frame's shares of its bytes) each mapped and copied by THREADS threads in 1 MiB pieces while a
 * thread of its own allocates ahead: the next dataset of the same file (as drift does), or the next file
 * (the page work of one file's allocation beside another's copy). Not part of drift: a probe for
 * choosing the write path (docs/performance.md, Decisions, Output).
 *   gcc -O2 -fopenmp tools/write_probe.c -o write_probe -lpthread && ./write_probe DIR MIB FILES THREADS */
#define _GNU_SOURCE
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
/* one file allocated, mapped and copied by th plain threads (usable in a forked child and beside another) */
typedef struct{char*m;const char*b;size_t a,e;}slice;
static void*copy_slice(void*v){slice*s=v;memcpy(s->m+s->a,s->b+s->a,s->e-s->a);return NULL;}
static void one_file(const char*p,const char*buf,size_t n,int th){
  int fd=open(p,O_RDWR|O_CREAT|O_TRUNC,0644); if(fd<0){perror("open");exit(1);}
  if(posix_fallocate(fd,0,n)){perror("fallocate");exit(1);}
  char*m=mmap(NULL,n,PROT_WRITE,MAP_SHARED,fd,0); if(m==MAP_FAILED){perror("mmap");exit(1);}
  pthread_t t[64]; slice s[64]; if(th>64)th=64; if(th<1)th=1;
  for(int i=0;i<th;i++){s[i]=(slice){m,buf,n*i/th,n*(i+1)/th}; if(pthread_create(&t[i],NULL,copy_slice,&s[i])){perror("pthread_create");exit(1);}}
  for(int i=0;i<th;i++)pthread_join(t[i],NULL);
  munmap(m,n); close(fd);
}
/* a frame's six datasets' shares of its bytes (34 B a particle: 12 12 4 1 1 4) */
static const int shares[6]={12,12,4,1,1,4};
static size_t range_at(size_t n,int k){size_t a=0;for(int i=0;i<k;i++)a+=n*shares[i]/34;return a/4096*4096;}
static size_t range_end(size_t n,int k){return k==5?n:range_at(n,k+1);}
/* the allocation ahead: ranges of one file (same: its six in turn, each marked done) or whole files (next) */
typedef struct{int fd[64];int files;size_t n;int same;volatile int done;}ahead_job;
static void*ahead_alloc(void*v){ahead_job*j=v;
  if(j->same){for(int k=0;k<6;k++){size_t a=range_at(j->n,k),b=range_end(j->n,k);if(posix_fallocate(j->fd[0],a,b-a)){perror("fallocate");exit(1);}__atomic_store_n(&j->done,k+1,__ATOMIC_RELEASE);}}
  else{for(int f=1;f<j->files;f++){if(posix_fallocate(j->fd[f],0,j->n)){perror("fallocate");exit(1);}__atomic_store_n(&j->done,f+1,__ATOMIC_RELEASE);}}
  return NULL;}
/* range [a, b) of fd copied from buf through a mapping of it by th threads in 1 MiB pieces, dynamic */
static void map_copy(int fd,const char*buf,size_t a,size_t b,int th){
  char*m=mmap(NULL,b-a,PROT_WRITE,MAP_SHARED,fd,(off_t)a); if(m==MAP_FAILED){perror("mmap");exit(1);}
  const size_t piece=1u<<20; const long pieces=(long)((b-a+piece-1)/piece);
  #pragma omp parallel for schedule(dynamic,1) num_threads(th)
  for(long q=0;q<pieces;q++){size_t lo=(size_t)q*piece,hi=lo+piece<b-a?lo+piece:b-a;memcpy(m+lo,buf+a+lo,hi-lo);}
  munmap(m,b-a);}
typedef struct{const char*dir;const char*buf;size_t n;int mode,side,files,th;}side_job;
static void*run_side(void*v){side_job*j=v;char p[512];
  for(int f=j->side;f<j->files;f+=2){snprintf(p,sizeof p,"%s/mb_%d_%d",j->dir,j->mode,f);one_file(p,j->buf,j->n,j->th);}
  return NULL;}
int main(int c,char**v){
  if(c!=5){fprintf(stderr,"usage: write_probe DIR MIB FILES THREADS\n");return 2;}
  const char*dir=v[1]; size_t mb=atol(v[2]); int files=atoi(v[3]); int th=atoi(v[4]);
  if(files<1||files>64){fprintf(stderr,"write_probe: FILES must be 1 to 64\n");return 2;}
  size_t n=mb<<20; char*buf=malloc(n); for(size_t i=0;i<n;i++)buf[i]=(char)(i*7);
  const char*names[]={"pwrite1","pwriteT","falloc+mmapT","mmapT(ftruncate)","falloc+pwrite1","pipe-falloc+mmapT","own-falloc+mmapT","falloc+mmapPOP+T","phases","mixed(ftruncate)","mixed(falloc)","pair-files(T/2)","pair-procs(T/2)","falloc+own-mmapT","ahead-same(T)","ahead-next(T)"};
  double ph[3]={0,0,0};
  for(int mode=0;mode<16;mode++){
    double t0=now(); char p[512];
    if(mode==14){
      for(int f=0;f<files;f++){
        snprintf(p,sizeof p,"%s/mb_%d_%d",dir,mode,f);
        ahead_job j={.files=1,.n=n,.same=1}; j.fd[0]=open(p,O_RDWR|O_CREAT|O_TRUNC,0644); if(j.fd[0]<0){perror("open");return 1;}
        pthread_t t; if(pthread_create(&t,NULL,ahead_alloc,&j)){perror("pthread_create");return 1;}
        for(int k=0;k<6;k++){while(__atomic_load_n(&j.done,__ATOMIC_ACQUIRE)<k+1){} map_copy(j.fd[0],buf,range_at(n,k),range_end(n,k),th);}
        pthread_join(t,NULL); close(j.fd[0]);
      }
    } else if(mode==15){
      ahead_job j={.files=files,.n=n,.same=0};
      for(int f=0;f<j.files;f++){snprintf(p,sizeof p,"%s/mb_%d_%d",dir,mode,f);j.fd[f]=open(p,O_RDWR|O_CREAT|O_TRUNC,0644);if(j.fd[f]<0){perror("open");return 1;}}
      if(posix_fallocate(j.fd[0],0,n)){perror("fallocate");return 1;} j.done=1;
      pthread_t t; if(pthread_create(&t,NULL,ahead_alloc,&j)){perror("pthread_create");return 1;}
      for(int f=0;f<j.files;f++){while(__atomic_load_n(&j.done,__ATOMIC_ACQUIRE)<f+1){} for(int k=0;k<6;k++)map_copy(j.fd[f],buf,range_at(n,k),range_end(n,k),th);}
      pthread_join(t,NULL); for(int f=0;f<j.files;f++)close(j.fd[f]);
    } else if(mode==13){
      for(int f=0;f<files;f++){
        snprintf(p,sizeof p,"%s/mb_%d_%d",dir,mode,f);
        int fd=open(p,O_RDWR|O_CREAT|O_TRUNC,0644); if(fd<0){perror("open");return 1;}
        if(posix_fallocate(fd,0,n)){perror("fallocate");return 1;}
        #pragma omp parallel num_threads(th)
        {int t=omp_get_thread_num();long pg=sysconf(_SC_PAGESIZE);size_t a=n*t/th/pg*pg,b=t+1==th?n:n*(t+1)/th/pg*pg;
         char*m=mmap(NULL,b-a,PROT_WRITE,MAP_SHARED,fd,(off_t)a); if(m==MAP_FAILED){perror("mmap");exit(1);}
         memcpy(m,buf+a,b-a); munmap(m,b-a);}
        close(fd);
      }
    } else if(mode>=11){
      side_job j[2]={{dir,buf,n,mode,0,files,th/2},{dir,buf,n,mode,1,files,th/2}};
      if(mode==11){pthread_t t;if(pthread_create(&t,NULL,run_side,&j[1])){perror("pthread_create");return 1;}run_side(&j[0]);pthread_join(t,NULL);}
      else{pid_t k[2];for(int i=0;i<2;i++){k[i]=fork();if(k[i]<0){perror("fork");return 1;}if(k[i]==0){run_side(&j[i]);_exit(0);}}
        for(int i=0;i<2;i++){int ws;if(waitpid(k[i],&ws,0)<0||!WIFEXITED(ws)||WEXITSTATUS(ws)){fprintf(stderr,"child failed\n");return 1;}}}
    }
    for(int f=0;f<(mode<11?files:0);f++){
      snprintf(p,sizeof p,"%s/mb_%d_%d",dir,mode,f);
      int fd=open(p,O_RDWR|O_CREAT|O_TRUNC,0644); if(fd<0){perror("open");return 1;}
      if(mode==0){for(size_t o=0;o<n;){size_t k=n-o<(16u<<20)?n-o:(16u<<20);ssize_t w=pwrite(fd,buf+o,k,o);if(w<=0){perror("pwrite");return 1;}o+=w;}}
      else if(mode==1){
        #pragma omp parallel num_threads(th)
        {int t=omp_get_thread_num();size_t a=n*t/th,b=n*(t+1)/th;for(size_t o=a;o<b;){ssize_t w=pwrite(fd,buf+o,b-o,o);if(w<=0){perror("pwrite");exit(1);}o+=w;}}
      } else if(mode==4){
        if(posix_fallocate(fd,0,n)){perror("fallocate");return 1;}
        for(size_t o=0;o<n;){size_t k=n-o<(16u<<20)?n-o:(16u<<20);ssize_t w=pwrite(fd,buf+o,k,o);if(w<=0){perror("pwrite");return 1;}o+=w;}
      } else if(mode==8){
        double a=now(); if(posix_fallocate(fd,0,n)){perror("fallocate");return 1;}
        double b=now(); char*m=mmap(NULL,n,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_POPULATE,fd,0); if(m==MAP_FAILED){perror("mmap");return 1;}
        double c2=now();
        #pragma omp parallel num_threads(th)
        {int t=omp_get_thread_num();size_t a=n*t/th,b=n*(t+1)/th;memcpy(m+a,buf+a,b-a);}
        ph[0]+=b-a; ph[1]+=c2-b; ph[2]+=now()-c2;
        munmap(m,n);
      } else if(mode==7){
        if(posix_fallocate(fd,0,n)){perror("fallocate");return 1;}
        char*m=mmap(NULL,n,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_POPULATE,fd,0); if(m==MAP_FAILED){perror("mmap");return 1;}
        #pragma omp parallel num_threads(th)
        {int t=omp_get_thread_num();size_t a=n*t/th,b=n*(t+1)/th;memcpy(m+a,buf+a,b-a);}
        munmap(m,n);
      } else if(mode>=9){
        if(mode==10){ if(posix_fallocate(fd,0,n)){perror("fallocate");return 1;} } else if(ftruncate(fd,n)){perror("ftruncate");return 1;}
        char*m=mmap(NULL,n,PROT_WRITE,MAP_SHARED,fd,0); if(m==MAP_FAILED){perror("mmap");return 1;}
        size_t piece=16u<<20;
        #pragma omp parallel for schedule(dynamic,1) num_threads(th)
        for(size_t o=0;o<n;o+=piece){
          size_t k=n-o<piece?n-o:piece;
          if(omp_get_thread_num()==0){for(size_t d=0;d<k;){ssize_t w=pwrite(fd,buf+o+d,k-d,o+d);if(w<=0){perror("pwrite");exit(1);}d+=w;}}
          else memcpy(m+o,buf+o,k);
        }
        munmap(m,n);
      } else if(mode>=5){
        char*m=mmap(NULL,n,PROT_WRITE,MAP_SHARED,fd,0); if(m==MAP_FAILED){perror("mmap");return 1;}
        size_t piece=16u<<20;
        if(mode==5){
          #pragma omp parallel num_threads(th)
          #pragma omp single
          for(size_t o=0;o<n;o+=piece){
            size_t k=n-o<piece?n-o:piece;
            if(posix_fallocate(fd,o,k)){perror("fallocate");exit(1);}
            for(int t=0;t<4;t++){
              #pragma omp task firstprivate(o,k,t)
              memcpy(m+o+k*t/4,buf+o+k*t/4,k*(t+1)/4-k*t/4);
            }
          }
        } else {
          if(ftruncate(fd,n)){perror("ftruncate");return 1;}
          #pragma omp parallel for schedule(dynamic,1) num_threads(th)
          for(size_t o=0;o<n;o+=piece){
            size_t k=n-o<piece?n-o:piece;
            if(posix_fallocate(fd,o,k)){perror("fallocate");exit(1);}
            memcpy(m+o,buf+o,k);
          }
        }
        munmap(m,n);
      } else {
        if(mode==2){ if(posix_fallocate(fd,0,n)){perror("fallocate");return 1;} } else if(ftruncate(fd,n)){perror("ftruncate");return 1;}
        char*m=mmap(NULL,n,PROT_WRITE,MAP_SHARED,fd,0); if(m==MAP_FAILED){perror("mmap");return 1;}
        #pragma omp parallel num_threads(th)
        {int t=omp_get_thread_num();size_t a=n*t/th,b=n*(t+1)/th;memcpy(m+a,buf+a,b-a);}
        munmap(m,n);
      }
      close(fd);
    }
    double t=now()-t0; printf("%-18s %s %zu MiB x %d, %d threads: %.2f GB/s\n",names[mode],dir,mb,files,th,(double)n*files/t/1e9);
    if(mode==8)printf("  phases a file: fallocate %.2f ms, mmap MAP_POPULATE %.2f ms, copy by %d threads %.2f ms\n",1e3*ph[0]/files,1e3*ph[1]/files,th,1e3*ph[2]/files);
    for(int f=0;f<files;f++){snprintf(p,sizeof p,"%s/mb_%d_%d",dir,mode,f);unlink(p);}
  }
  return 0;
}
