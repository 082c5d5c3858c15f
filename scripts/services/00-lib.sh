# shellcheck source=scripts/services/lib.sh
source scripts/services/lib.sh
