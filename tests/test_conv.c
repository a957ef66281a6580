/* CUnit suite: the short convolution (to be written). */
#include "test_common.h"

static void add_tests(CU_pSuite suite) { test_add_checks(suite, "conv"); }

int main(void) { return test_main("conv", add_tests); }
