/* softmax.cl: (to be written) */
