// Fixture: a second file of the lesson. Its header lists a longer name only, which does not
// name the impl it registers (a name counts as a whole word):
//
//   v3_no_header_extra   not the impl's name
__global__ void demo_v3_no_header(float* g_y, long n) {}
