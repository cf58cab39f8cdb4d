/* Loads a SavedModel the way TF Serving does (TensorFlow's C API:
 * TF_LoadSessionFromSavedModel imports the whole graph and restores the
 * variables) and runs tensors through the session.
 *
 *   saved_model_runner [--library PATH] EXPORT_DIR TAG [RUN]...
 *   RUN:  --run [--feed NAME DTYPE SHAPE VALUES]... [--fetch NAME]... [--target OP]...
 *
 * NAME is a graph tensor ("serve_ids:0"), DTYPE one of float32, int32, int64,
 * SHAPE the comma-separated dimensions ("4", "2,2"), VALUES the comma-separated
 * elements in row-major order. Each fetched tensor prints
 * one line: its name, then its values with 9 significant digits. Runs share
 * one session, so a train signature run twice trains two steps.
 * --library calls TF_LoadLibrary first (a TF Serving build links the ops in
 * statically instead: the second build of this program). A load failure
 * prints TensorFlow's message and exits 1. See docs/design.md, "Production".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"

enum { kMaxTensors = 32 };

static void die_if_failed(TF_Status* status, const char* what) {
  if (TF_GetCode(status) == TF_OK) return;
  fprintf(stderr, "saved_model_runner: %s failed: %s\n", what, TF_Message(status));
  exit(1);
}

static void usage(void) {
  fprintf(stderr,
          "usage: saved_model_runner [--library PATH] EXPORT_DIR TAG "
          "[--run [--feed NAME DTYPE SHAPE VALUES]... [--fetch NAME]... [--target OP]...]...\n");
  exit(2);
}

/* "name:3" -> the graph's output 3 of operation "name". */
static TF_Output find_tensor(TF_Graph* graph, const char* spec) {
  char op_name[512];
  const char* colon = strrchr(spec, ':');
  size_t length = colon ? (size_t)(colon - spec) : strlen(spec);
  if (length >= sizeof(op_name)) usage();
  memcpy(op_name, spec, length);
  op_name[length] = '\0';
  TF_Output output = {TF_GraphOperationByName(graph, op_name), colon ? atoi(colon + 1) : 0};
  if (output.oper == NULL) {
    fprintf(stderr, "saved_model_runner: the graph has no operation '%s'\n", op_name);
    exit(1);
  }
  return output;
}

enum { kMaxDims = 8 };

static TF_Tensor* parse_tensor(const char* dtype_name, const char* shape, const char* values) {
  TF_DataType dtype;
  size_t element_size;
  if (strcmp(dtype_name, "float32") == 0) {
    dtype = TF_FLOAT, element_size = 4;
  } else if (strcmp(dtype_name, "int32") == 0) {
    dtype = TF_INT32, element_size = 4;
  } else if (strcmp(dtype_name, "int64") == 0) {
    dtype = TF_INT64, element_size = 8;
  } else {
    fprintf(stderr, "saved_model_runner: unknown dtype '%s'\n", dtype_name);
    exit(2);
  }
  int64_t dims[kMaxDims];
  int n_dims = 0;
  int64_t count = 1;
  for (const char* cursor = shape; *cursor && n_dims < kMaxDims; ++n_dims) {
    char* end;
    dims[n_dims] = strtoll(cursor, &end, 10);
    count *= dims[n_dims];
    cursor = *end == ',' ? end + 1 : end;
  }
  int64_t n_values = *values ? 1 : 0;
  for (const char* c = values; *c; ++c) n_values += *c == ',';
  if (n_values != count) {
    fprintf(stderr, "saved_model_runner: shape [%s] holds %lld values, got %lld\n", shape,
            (long long)count, (long long)n_values);
    exit(2);
  }
  TF_Tensor* tensor = TF_AllocateTensor(dtype, dims, n_dims, (size_t)count * element_size);
  char* data = (char*)TF_TensorData(tensor);
  const char* cursor = values;
  for (int64_t i = 0; i < count; ++i) {
    char* end;
    if (dtype == TF_FLOAT) {
      ((float*)data)[i] = strtof(cursor, &end);
    } else if (dtype == TF_INT32) {
      ((int32_t*)data)[i] = (int32_t)strtol(cursor, &end, 10);
    } else {
      ((int64_t*)data)[i] = strtoll(cursor, &end, 10);
    }
    cursor = *end == ',' ? end + 1 : end;
  }
  return tensor;
}

static void print_tensor(const char* name, const TF_Tensor* tensor) {
  int64_t count = TF_TensorElementCount(tensor);
  const void* data = TF_TensorData(tensor);
  printf("%s", name);
  for (int64_t i = 0; i < count; ++i) {
    switch (TF_TensorType(tensor)) {
      case TF_FLOAT:
        printf(" %.9g", ((const float*)data)[i]);
        break;
      case TF_DOUBLE:
        printf(" %.17g", ((const double*)data)[i]);
        break;
      case TF_INT32:
        printf(" %d", ((const int32_t*)data)[i]);
        break;
      case TF_INT64:
        printf(" %lld", (long long)((const int64_t*)data)[i]);
        break;
      default:
        printf(" ?");
        break;
    }
  }
  printf("\n");
}

int main(int argc, char** argv) {
  int arg = 1;
  TF_Status* status = TF_NewStatus();
  if (arg + 1 < argc && strcmp(argv[arg], "--library") == 0) {
    TF_Library* library = TF_LoadLibrary(argv[arg + 1], status);
    die_if_failed(status, "TF_LoadLibrary");
    (void)library; /* stays loaded for the life of the process */
    arg += 2;
  }
  if (arg + 2 > argc) usage();
  const char* export_dir = argv[arg++];
  const char* tag = argv[arg++];

  TF_Graph* graph = TF_NewGraph();
  TF_SessionOptions* options = TF_NewSessionOptions();
  TF_Session* session =
      TF_LoadSessionFromSavedModel(options, NULL, export_dir, &tag, 1, graph, NULL, status);
  die_if_failed(status, "TF_LoadSessionFromSavedModel");
  printf("loaded %s\n", export_dir);

  while (arg < argc) {
    if (strcmp(argv[arg++], "--run") != 0) usage();
    TF_Output inputs[kMaxTensors], outputs[kMaxTensors];
    TF_Tensor* input_values[kMaxTensors];
    TF_Tensor* output_values[kMaxTensors];
    const char* output_names[kMaxTensors];
    const TF_Operation* targets[kMaxTensors];
    int n_inputs = 0, n_outputs = 0, n_targets = 0;
    while (arg < argc && strcmp(argv[arg], "--run") != 0) {
      const char* flag = argv[arg++];
      if (strcmp(flag, "--feed") == 0 && arg + 4 <= argc && n_inputs < kMaxTensors) {
        inputs[n_inputs] = find_tensor(graph, argv[arg]);
        input_values[n_inputs++] = parse_tensor(argv[arg + 1], argv[arg + 2], argv[arg + 3]);
        arg += 4;
      } else if (strcmp(flag, "--fetch") == 0 && arg < argc && n_outputs < kMaxTensors) {
        output_names[n_outputs] = argv[arg];
        outputs[n_outputs++] = find_tensor(graph, argv[arg++]);
      } else if (strcmp(flag, "--target") == 0 && arg < argc && n_targets < kMaxTensors) {
        targets[n_targets++] = find_tensor(graph, argv[arg++]).oper;
      } else {
        usage();
      }
    }
    TF_SessionRun(session, NULL, inputs, input_values, n_inputs, outputs, output_values, n_outputs,
                  targets, n_targets, NULL, status);
    die_if_failed(status, "TF_SessionRun");
    for (int i = 0; i < n_outputs; ++i) {
      print_tensor(output_names[i], output_values[i]);
      TF_DeleteTensor(output_values[i]);
    }
    for (int i = 0; i < n_inputs; ++i) TF_DeleteTensor(input_values[i]);
  }

  TF_CloseSession(session, status);
  TF_DeleteSession(session, status);
  TF_DeleteSessionOptions(options);
  TF_DeleteGraph(graph);
  TF_DeleteStatus(status);
  return 0;
}
