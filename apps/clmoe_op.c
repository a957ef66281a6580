/* clmoe-op (to be written). */
#include "app_common.h"

int main(void) { return 0; }
