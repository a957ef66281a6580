/* CUnit suite: KDA (the "kda" conformance checks), what the lower bound prevents, and the
 * argument errors. */
#include <math.h>
#include <string.h>

#include "test_common.h"

static void add_tests(CU_pSuite suite) { test_add_checks(suite, "kda"); }

int main(void) { return test_main("kda", add_tests); }
