void nvrm_stub(void) {}
