/* CUnit suite: MLA (to be written). */
#include "test_common.h"

static void add_tests(CU_pSuite suite) { test_add_checks(suite, "mla"); }

int main(void) { return test_main("mla", add_tests); }
