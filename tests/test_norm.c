/* CUnit suite for the norm operator family (to be written). */
#include "test_common.h"

static void add_tests(CU_pSuite suite) { test_add_checks(suite, "norm"); }

int main(void) { return test_main("norm", add_tests); }
