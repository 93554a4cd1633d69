// PLACEHOLDER
extern "C" int steady_spm_abi_version() { return 1; }
