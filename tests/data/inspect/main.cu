// Host program for the relocatable-device-code executable fixture (`rdc_app`).
__global__ void local_scratch(const int* idx, float* out, int n);
int main() {
  local_scratch<<<1, 1>>>(nullptr, nullptr, 0);
  return 0;
}
