# cmake -DCHECKER=check_stages.cmake -DWORK=dir -P check_stages_test.cmake
#
# The stage check fails a stage that includes a later one, naming the file
# and line, and passes one that includes only what it may (lines with ";",
# brackets and a trailing backslash before the include keep their numbers).
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(good "${WORK}/good.h")
set(bad "${WORK}/bad.cc")
file(WRITE "${good}" "#pragma once\n#include \"analyzer/model/timeline.h\"\nint a[2] = {1, 2};\n#define X \\\n  1\n")
file(WRITE "${bad}" "#include \"analyzer/read/trace_reader.h\"\nint b[3]; int c;\n#define Y(x) \\\n  x\n#include \"analyzer/report/json.h\"\n")

execute_process(COMMAND ${CMAKE_COMMAND} -DSTAGE=read -DALLOWED=read|model "-DFILES=${good}"
                        -DSTAMP=${WORK}/good.checked -P ${CHECKER}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT EXISTS "${WORK}/good.checked")
  message(FATAL_ERROR "an allowed include failed the check (${rc}): ${err}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -DSTAGE=read -DALLOWED=read|model "-DFILES=${good}|${bad}"
                        -DSTAMP=${WORK}/bad.checked -P ${CHECKER}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR EXISTS "${WORK}/bad.checked")
  message(FATAL_ERROR "an include of a later stage passed the check")
endif()
if(NOT err MATCHES "bad.cc:5: stage read may include analyzer/{read,model}/ only, not analyzer/report/")
  message(FATAL_ERROR "the check does not name the file, line and stage:\n${err}")
endif()
if(err MATCHES "good.h" OR err MATCHES "bad.cc:1:")
  message(FATAL_ERROR "the check names an allowed include:\n${err}")
endif()
message(STATUS "stage check: the later stage's include named at bad.cc:5")
