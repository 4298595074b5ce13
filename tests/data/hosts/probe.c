/* What a CUDA program does first: dlopen libcuda.so.1 by name (as cudart does), cuInit, and
   the driver's version. Exit 3 when the loader finds no libcuda.so.1. */
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (driver == NULL) {
        fprintf(stderr, "probe: %s\n", dlerror());
        return 3;
    }
    int (*init)(unsigned int) = (int (*)(unsigned int))dlsym(driver, "cuInit");
    int (*version)(int *) = (int (*)(int *))dlsym(driver, "cuDriverGetVersion");
    if (init == NULL || version == NULL || init(0) != 0) {
        fprintf(stderr, "probe: libcuda.so.1 has no working cuInit\n");
        return 4;
    }
    int found = 0;
    version(&found);
    printf("driver %d\n", found);
    return 0;
}
