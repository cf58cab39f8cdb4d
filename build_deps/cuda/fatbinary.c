// `fatbinary` for clang's CUDA driver, over NVIDIA's libnvfatbin.
//
// PyPI's CUDA 12 wheels have ptxas but not the fatbinary tool, which clang
// runs to bundle each file's per-architecture images (cubins from ptxas, PTX
// from clang) into the one fat binary the host object embeds. libnvfatbin
// (nvidia-nvfatbin-cu12) writes the same format, so this program takes the
// command line clang passes:
//
//   fatbinary -64 --create OUT --image=profile=sm_XX,file=A.cubin
//             --image=profile=compute_XX,file=A.ptx ...
//
// and fails on anything else, so that a new clang option is noticed here
// rather than silently dropped. build_deps/cuda/toolchain.sh compiles it into
// the assembled toolkit's bin/. Why: see docs/design.md, "GPU boundary".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvFatbin.h"

static int fail(const char* what, const char* detail) {
  fprintf(stderr, "fatbinary: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  return 1;
}

// The whole file, NUL-terminated (nvFatbinAddPTX takes PTX as a C string).
static char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char* data = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    data = malloc((size_t)n + 1);
    if (data != NULL && fread(data, 1, (size_t)n, f) != (size_t)n) {
      free(data);
      data = NULL;
    }
  }
  fclose(f);
  if (data == NULL) return NULL;
  data[n] = '\0';
  *size = (size_t)n;
  return data;
}

static int check(nvFatbinResult result, const char* what) {
  if (result == NVFATBIN_SUCCESS) return 0;
  return fail(what, nvFatbinGetErrorString(result));
}

int main(int argc, char** argv) {
  // Uncompressed: every CUDA 12 driver reads it, and nothing is decompressed at load.
  const char* options[] = {"-64", "-compress=false", "-host=linux"};
  nvFatbinHandle handle;
  if (check(nvFatbinCreate(&handle, options, sizeof(options) / sizeof(options[0])),
            "nvFatbinCreate")) {
    return 1;
  }
  const char* out = NULL;
  int images = 0;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (strcmp(arg, "-64") == 0 || strcmp(arg, "--64") == 0) continue;
    if (strcmp(arg, "--create") == 0 && i + 1 < argc) {
      out = argv[++i];
      continue;
    }
    static const char kImage[] = "--image=profile=";
    if (strncmp(arg, kImage, sizeof(kImage) - 1) != 0) return fail("unsupported argument", arg);
    // profile=sm_75,file=PATH (a cubin) or profile=compute_75,file=PATH (PTX)
    const char* profile = arg + sizeof(kImage) - 1;
    const char* comma = strchr(profile, ',');
    if (comma == NULL || strncmp(comma, ",file=", 6) != 0) return fail("bad --image", arg);
    const char* path = comma + 6;
    char arch[16];
    int is_ptx;
    size_t profile_len = (size_t)(comma - profile);
    if (profile_len > 3 && strncmp(profile, "sm_", 3) == 0) {
      is_ptx = 0;
      profile += 3;
      profile_len -= 3;
    } else if (profile_len > 8 && strncmp(profile, "compute_", 8) == 0) {
      is_ptx = 1;
      profile += 8;
      profile_len -= 8;
    } else {
      return fail("unsupported profile", arg);
    }
    if (profile_len >= sizeof(arch)) return fail("unsupported profile", arg);
    memcpy(arch, profile, profile_len);
    arch[profile_len] = '\0';
    size_t size = 0;
    char* data = read_file(path, &size);
    if (data == NULL) return fail("cannot read", path);
    nvFatbinResult result = is_ptx ? nvFatbinAddPTX(handle, data, size + 1, arch, path, "")
                                   : nvFatbinAddCubin(handle, data, size, arch, path);
    free(data);
    if (check(result, is_ptx ? "nvFatbinAddPTX" : "nvFatbinAddCubin")) return 1;
    ++images;
  }
  if (out == NULL) return fail("no --create OUTPUT", NULL);
  if (images == 0) return fail("no --image", NULL);
  size_t size = 0;
  if (check(nvFatbinSize(handle, &size), "nvFatbinSize")) return 1;
  void* buffer = malloc(size);
  if (buffer == NULL) return fail("out of memory", NULL);
  if (check(nvFatbinGet(handle, buffer), "nvFatbinGet")) return 1;
  FILE* f = fopen(out, "wb");
  if (f == NULL || fwrite(buffer, 1, size, f) != size || fclose(f) != 0) {
    return fail("cannot write", out);
  }
  free(buffer);
  nvFatbinDestroy(&handle);
  return 0;
}
