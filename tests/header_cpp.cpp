// header_cpp.cpp - include/mor.h used from C++.
//
// Built and run by tests/test_header.sh with -std=c++11 -pedantic -Werror
// -Wall -Wextra: every declaration must have C linkage (the program links
// against libmor.a) and every enum must stay free of duplicates. It reuses the
// C checks of test_header.c, plus what only C++ can assert about the structs
// that bindings mirror.
#include "mor.h"

#include <type_traits>

static_assert(std::is_standard_layout<mor_model_params>::value &&
              std::is_trivial<mor_model_params>::value, "mor_model_params is a plain C struct");
static_assert(std::is_standard_layout<mor_context_params>::value &&
              std::is_trivial<mor_context_params>::value, "mor_context_params is a plain C struct");
static_assert(std::is_standard_layout<mor_sampler_params>::value &&
              std::is_trivial<mor_sampler_params>::value, "mor_sampler_params is a plain C struct");
static_assert(std::is_standard_layout<mor_router_stats>::value &&
              std::is_trivial<mor_router_stats>::value, "mor_router_stats is a plain C struct");
static_assert(std::is_same<mor_status, int32_t>::value, "mor_status is int32_t");
static_assert(std::is_same<mor_token, int32_t>::value, "mor_token is int32_t");

#include "test_header.c"
