/* CUnit suite for the embed operator family (to be written). */
#include "test_common.h"

static void add_tests(CU_pSuite suite) { test_add_checks(suite, "embed"); }

int main(void) { return test_main("embed", add_tests); }
