/* A stand-in for the NVIDIA driver's libcuda.so.1: the two entry points a CUDA program calls
   first. CAPPLAN_FAKE_VERSION is what cuDriverGetVersion reports (12040: CUDA 12.4). */
int cuInit(unsigned int flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *version) { *version = CAPPLAN_FAKE_VERSION; return 0; }
