// The same consumer as dlpack_consumer.c, compiled as C++: the header-only
// DLPack route must build and behave the same in both languages.
#define DLPACK_CONSUMER_NAME "devbuf_dlpack_consumer_cpp"
#define DLPACK_CONSUMER_INIT PyInit_devbuf_dlpack_consumer_cpp
#include "dlpack_consumer.c"
