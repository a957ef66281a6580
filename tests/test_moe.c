/* CUnit suite: MOE (to be written). */
#include "test_common.h"

static void add_tests(CU_pSuite suite) { test_add_checks(suite, "moe"); }

int main(void) { return test_main("moe", add_tests); }
