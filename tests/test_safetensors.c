/* CUnit suite: safetensors files (to be written). */
#include "test_common.h"

static void add_tests(CU_pSuite suite) { (void)suite; }

int main(void) { return test_main("safetensors", add_tests); }
