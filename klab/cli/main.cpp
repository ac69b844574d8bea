#include "klab/cli.hpp"

int main(int argc, char** argv) { return klab::klab_main(argc, argv); }
