# cmake -DSTAGE=name -DALLOWED=a|b -DFILES=f1|f2 [-DSTAMP=file] -P check_stages.cmake
#
# Fails when one of FILES includes an analyzer/ header of a stage not in
# ALLOWED: "FILE:LINE: stage STAGE may include analyzer/{...} only, not
# analyzer/OTHER/...". Writes STAMP when every include is allowed.
cmake_minimum_required(VERSION 3.20)
string(REPLACE "|" ";" allowed "${ALLOWED}")
string(REPLACE "|" ";" files "${FILES}")
set(errors "")
foreach(file IN LISTS files)
  # One list element a line: a list splits at ";" outside brackets, and
  # not after a backslash, so those go first.
  file(READ "${file}" content)
  string(REPLACE "\\" "/" content "${content}")
  string(REPLACE ";" "," content "${content}")
  string(REPLACE "[" "(" content "${content}")
  string(REPLACE "]" ")" content "${content}")
  string(REPLACE "\n" ";" lines "${content}")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]+\"analyzer/([a-z_]+)/[^\"]*\"")
      set(stage "${CMAKE_MATCH_1}")
      if(NOT stage IN_LIST allowed)
        string(JOIN "," allowed_text ${allowed})
        string(APPEND errors "${file}:${n}: stage ${STAGE} may include analyzer/{${allowed_text}}/ only, not analyzer/${stage}/\n")
      endif()
    endif()
  endforeach()
endforeach()
if(errors)
  message(NOTICE "${errors}")
  message(FATAL_ERROR "analyzer stage ${STAGE} reaches up the pipeline (analyzer/CMakeLists.txt)")
endif()
if(STAMP)
  file(WRITE "${STAMP}" "${STAGE}: ${ALLOWED}\n")
endif()
