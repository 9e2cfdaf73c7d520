/* dnnl_small_m.c: oneDNN fp32 matmul at the row counts of one sentence, on one thread.
 *
 * M in {30, 64, 130} rows x the linear layers of MiniLM (K x N: 384x384, 384x1536 + exact-GELU
 * post-op, 1536x384) and BERT-base (768x768, 768x3072 + GELU, 3072x768): src (M, K) "ab", weights
 * (K, N) reordered once into the primitive's preferred layout ("any"; WTAG=64|48|32|16 forces
 * BA16a<WTAG>b), bias (1, N), dst (M, N). Weights rotate over copies totalling about 200 MB, so
 * that each call reads its weights from memory as a model's layers do. Per case: 3 warm-ups,
 * then repetitions for 0.4 s; prints the median time, 2*M*K*N / median in GFLOP/s and the
 * implementation oneDNN picked. Compiles against the 2.x (Debian 12's libdnnl-dev 2.6) and the
 * 3.x C API (e.g. the onednn-cpu-gomp 2023.2.0 wheel from PyPI: oneDNN 3.2).
 * Run by run_xeon.sh; a one-off measurement tool, not part of the build.
 */
#define _GNU_SOURCE
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#if DNNL_VERSION_MAJOR>=3
#define MD(x) (x)
#else
#define MD(x) (&(x))
#endif
#define CK(x) do{ if((x)!=dnnl_success){fprintf(stderr,"fail %s line %d\n",#x,__LINE__);exit(1);} }while(0)
static dnnl_format_tag_t wtag(void){const char*e=getenv("WTAG"); if(!e)return dnnl_format_tag_any;
 if(!strcmp(e,"64"))return dnnl_BA16a64b; if(!strcmp(e,"48"))return dnnl_BA16a48b; if(!strcmp(e,"32"))return dnnl_BA16a32b; if(!strcmp(e,"16"))return dnnl_BA16a16b; return dnnl_format_tag_any;}
static dnnl_engine_t eng; static dnnl_stream_t st;
static int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static void run(int M,int K,int N,int gelu,int copies){
  dnnl_dims_t sd={M,K}, wd={K,N}, dd={M,N}, bd={1,N};
#if DNNL_VERSION_MAJOR>=3
  dnnl_memory_desc_t smd,wmd,dmd,bmd,wany;
  CK(dnnl_memory_desc_create_with_tag(&smd,2,sd,dnnl_f32,dnnl_ab));
  CK(dnnl_memory_desc_create_with_tag(&dmd,2,dd,dnnl_f32,dnnl_ab));
  CK(dnnl_memory_desc_create_with_tag(&bmd,2,bd,dnnl_f32,dnnl_ab));
  CK(dnnl_memory_desc_create_with_tag(&wany,2,wd,dnnl_f32,wtag()));
  dnnl_dims_t ws={1,K}; CK(dnnl_memory_desc_create_with_strides(&wmd,2,wd,dnnl_f32,ws));
  dnnl_primitive_attr_t attr; CK(dnnl_primitive_attr_create(&attr));
  if(gelu){dnnl_post_ops_t po;CK(dnnl_post_ops_create(&po));CK(dnnl_post_ops_append_eltwise(po,dnnl_eltwise_gelu_erf,0,0));CK(dnnl_primitive_attr_set_post_ops(attr,po));}
  dnnl_primitive_desc_t pd; CK(dnnl_matmul_primitive_desc_create(&pd,eng,smd,wany,bmd,dmd,attr));
  const_dnnl_memory_desc_t wq=dnnl_primitive_desc_query_md(pd,dnnl_query_weights_md,0);
  size_t wbytes=dnnl_memory_desc_get_size(wq);
#else
  dnnl_memory_desc_t smd,wmd,dmd,bmd,wany; dnnl_matmul_desc_t mm;
  CK(dnnl_memory_desc_init_by_tag(&smd,2,sd,dnnl_f32,dnnl_ab));
  CK(dnnl_memory_desc_init_by_tag(&dmd,2,dd,dnnl_f32,dnnl_ab));
  CK(dnnl_memory_desc_init_by_tag(&bmd,2,bd,dnnl_f32,dnnl_ab));
  CK(dnnl_memory_desc_init_by_tag(&wany,2,wd,dnnl_f32,wtag()));
  dnnl_dims_t ws={1,K}; CK(dnnl_memory_desc_init_by_strides(&wmd,2,wd,dnnl_f32,ws));
  CK(dnnl_matmul_desc_init(&mm,&smd,&wany,&bmd,&dmd));
  dnnl_primitive_attr_t attr; CK(dnnl_primitive_attr_create(&attr));
  if(gelu){dnnl_post_ops_t po;CK(dnnl_post_ops_create(&po));CK(dnnl_post_ops_append_eltwise(po,1.f,dnnl_eltwise_gelu_erf,0,0));CK(dnnl_primitive_attr_set_post_ops(attr,po));}
  dnnl_primitive_desc_t pd; CK(dnnl_primitive_desc_create(&pd,&mm,attr,eng,NULL));
  const dnnl_memory_desc_t *wq=dnnl_primitive_desc_query_md(pd,dnnl_query_weights_md,0);
  size_t wbytes=dnnl_memory_desc_get_size(wq);
#endif
  const char *impl; dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&impl);
  dnnl_primitive_t p; CK(dnnl_primitive_create(&p,pd));
  float *A=aligned_alloc(64,(size_t)M*K*4+64), *C=aligned_alloc(64,(size_t)M*N*4+64), *b=aligned_alloc(64,N*4+64);
  for(long i=0;i<(long)M*K;i++)A[i]=(rand()%100)/100.f-0.5f; for(int i=0;i<N;i++)b[i]=0.01f*i;
  float *W=malloc((size_t)K*N*4); for(long i=0;i<(long)K*N;i++)W[i]=(rand()%100)/1000.f;
  void **Wr=malloc(copies*sizeof(void*));
  dnnl_memory_t ms,md,mw,mb,mu; CK(dnnl_memory_create(&mu,MD(wmd),eng,W));
  for(int c=0;c<copies;c++){Wr[c]=aligned_alloc(64,(wbytes+63)/64*64);
    CK(dnnl_memory_create(&mw,wq,eng,Wr[c])); dnnl_primitive_desc_t rpd; dnnl_primitive_t rp;
    CK(dnnl_reorder_primitive_desc_create(&rpd,MD(wmd),eng,wq,eng,NULL)); CK(dnnl_primitive_create(&rp,rpd));
    dnnl_exec_arg_t ra[2]={{DNNL_ARG_FROM,mu},{DNNL_ARG_TO,mw}}; CK(dnnl_primitive_execute(rp,st,2,ra)); dnnl_stream_wait(st);
    dnnl_memory_destroy(mw);}
  CK(dnnl_memory_create(&ms,MD(smd),eng,A)); CK(dnnl_memory_create(&md,MD(dmd),eng,C)); CK(dnnl_memory_create(&mb,MD(bmd),eng,b));
  CK(dnnl_memory_create(&mw,wq,eng,Wr[0]));
  int reps=0; double t[4000]; double tot=0;
  for(int r=0;r<4000 && tot<0.4;r++){ dnnl_memory_set_data_handle(mw,Wr[r%copies]);
    dnnl_exec_arg_t a[4]={{DNNL_ARG_SRC,ms},{DNNL_ARG_WEIGHTS,mw},{DNNL_ARG_BIAS,mb},{DNNL_ARG_DST,md}};
    double t0=now(); CK(dnnl_primitive_execute(p,st,4,a)); dnnl_stream_wait(st); double dt=now()-t0; if(r>=3){t[reps++]=dt;tot+=dt;} }
  qsort(t,reps,sizeof(double),cmpd); double med=t[reps/2];
  printf("%4d x %4d x %4d gelu=%d  %8.1f us  %6.1f GFLOP/s  %s\n",M,K,N,gelu,med*1e6,2.0*M*K*N/med*1e-9,impl);
}
int main(int argc,char**argv){
  CK(dnnl_engine_create(&eng,dnnl_cpu,0)); CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
  const dnnl_version_t*v=dnnl_version(); printf("oneDNN %d.%d.%d\n",v->major,v->minor,v->patch);
  int Ms[]={30,64,130};
  int sh[][3]={{384,384,0},{384,1536,1},{1536,384,0},{768,768,0},{768,3072,1},{3072,768,0}};
  for(int s=0;s<6;s++) for(int m=0;m<3;m++){ size_t wb=(size_t)sh[s][0]*sh[s][1]*4; int copies= (int)(200e6/wb)+1; if(copies>64)copies=64; run(Ms[m],sh[s][0],sh[s][1],sh[s][2],copies);} 
}
